//! "Did you mean": the closest known name to a misspelt one, for messages about unknown
//! plugins, sections and fields.

/// The known name closest to `name` (edit distance at most a third of its length, and at
/// most 2), if any.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).clamp(1, 2);
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, k)| (*d, *k))
        .map(|(_, k)| k)
}

/// ` (did you mean `x`?)` or nothing.
pub fn hint<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(name, known)
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        let known = ["shell", "cargo", "command", "fs"];
        assert_eq!(did_you_mean("shel", known), Some("shell"));
        assert_eq!(did_you_mean("carg", known), Some("cargo"));
        assert_eq!(did_you_mean("comand", known), Some("command"));
        assert_eq!(did_you_mean("python", known), None);
        assert_eq!(did_you_mean("tool", ["tools", "bash"]), Some("tools"));
        assert_eq!(hint("xyz", known), "");
    }
}
