//! "Did you mean": the closest known name to a misspelt one, for messages about unknown
//! plugins, sections and fields.

/// The known name closest to `name` (edit distance at most a third of its length, and at
/// most 2), if any.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).clamp(1, 2);
    known
        .into_iter()
        .map(|k| (distance(name, k), k))
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

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
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
