//! Secret values kept out of what kiln prints about a configuration file: the toml parser's
//! error snippets quote the line at fault, and the "changed since you trusted it" warning
//! prints changed lines; a line that sets a key named like a secret (`api_key`, `token`,
//! `password`, `secret`) or holds a URL with a user name is shown without its value.

/// Key names (any case, anywhere in the key) whose values are never shown.
const SECRET_WORDS: &[&str] = &[
    "api_key", "apikey", "api-key", "token", "password", "passwd", "secret",
];

/// Whether a line of a configuration file may hold a secret value.
pub(crate) fn may_hold_secret(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    if SECRET_WORDS.iter().any(|w| lower.contains(w)) {
        return true;
    }
    // A URL with userinfo (`https://user:pass@host`, `https://TOKEN@host`).
    lower.match_indices("://").any(|(i, _)| {
        lower[i + 3..]
            .split(|c: char| c == '/' || c == '"' || c == '\'' || c.is_whitespace())
            .next()
            .is_some_and(|authority| authority.contains('@'))
    })
}

/// `line` with its value hidden when it may hold a secret: `KEY = <value not shown>` (or the
/// whole line hidden when it has no `=`).
pub(crate) fn line(line: &str) -> String {
    if !may_hold_secret(line) {
        return line.to_string();
    }
    match line.split_once('=') {
        Some((key, _)) if !may_hold_secret_value_in_key(key) => {
            format!("{}= <value not shown: it may be a secret>", key)
        }
        _ => "<line not shown: it may hold a secret>".to_string(),
    }
}

/// A key part that itself holds a URL with userinfo is not shown either.
fn may_hold_secret_value_in_key(key: &str) -> bool {
    key.contains("://")
}

/// A toml parser message with the value of every quoted source line (`  2 | api_key = ...`)
/// that may hold a secret hidden.
pub(crate) fn parse_message(message: &str) -> String {
    message
        .lines()
        .map(|l| match l.split_once(" | ") {
            Some((num, text))
                if !num.trim().is_empty() && num.trim().bytes().all(|b| b.is_ascii_digit()) =>
            {
                format!("{num} | {}", line(text))
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_hidden_and_other_lines_kept() {
        assert_eq!(
            line("api_key = \"sk-1\" model = \"m\""),
            "api_key = <value not shown: it may be a secret>"
        );
        assert_eq!(
            line("GITHUB_TOKEN=ghp_x"),
            "GITHUB_TOKEN= <value not shown: it may be a secret>"
        );
        assert_eq!(
            line("url = \"postgres://u:pw@h/db\""),
            "url = <value not shown: it may be a secret>"
        );
        assert_eq!(line("model = \"gpt\""), "model = \"gpt\"");
        assert_eq!(
            line("base_url = \"https://h/v1\""),
            "base_url = \"https://h/v1\""
        );
        let m = "TOML parse error at line 2, column 30\n  |\n2 | api_key = \"sk-SECRET\" model = 1\n  |   ^\nexpected newline";
        let r = parse_message(m);
        assert!(
            !r.contains("sk-SECRET")
                && r.contains("expected newline")
                && r.contains("2 | api_key = <value"),
            "{r}"
        );
    }
}
