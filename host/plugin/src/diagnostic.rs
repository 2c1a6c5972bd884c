//! Diagnostics and severities as kiln shows them: WIT names and JSON.

use super::{Diagnostic, Severity};

/// The WIT name of a severity (`error`, `warning`, `note`, `help`).
pub fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
        Severity::Help => "help",
    }
}

/// The code of a failing test's diagnostic.
pub const TEST_FAILURE: &str = "test-failure";

/// The failing test a diagnostic is about, by the contract's convention for runners (the WIT
/// `diagnostic` has no field for it): code `test-failure` and a message `test NAME failed`,
/// optionally followed by `: WHY`. The name ends at the first ` failed` that ends the message
/// or is followed by `:`. `None` for any other diagnostic.
pub fn test_name(d: &Diagnostic) -> Option<&str> {
    if d.code.as_deref() != Some(TEST_FAILURE) {
        return None;
    }
    let first = d.message.lines().next()?;
    let rest = first.strip_prefix("test ")?;
    let mut from = 0;
    while let Some(at) = rest[from..].find(" failed") {
        let end = from + at;
        let after = &rest[end + " failed".len()..];
        if (after.is_empty() || after.starts_with(':')) && end > 0 {
            return Some(&rest[..end]);
        }
        from = end + 1;
    }
    None
}

/// A diagnostic as JSON with WIT names, and `test`: the failing test's name ([`test_name`]),
/// `null` for any other diagnostic.
pub fn diagnostic_json(d: &Diagnostic) -> serde_json::Value {
    serde_json::json!({
        "file": d.file, "line": d.line, "column": d.column, "severity": severity_name(d.severity),
        "code": d.code, "message": d.message, "test": test_name(d),
    })
}

/// One line for a person: `file:line:col: severity: message` (parts that are unknown left out).
pub fn diagnostic_line(d: &Diagnostic) -> String {
    let mut at = d.file.clone();
    if d.line > 0 {
        at.push_str(&format!(":{}", d.line));
        if d.column > 0 {
            at.push_str(&format!(":{}", d.column));
        }
    }
    let first = d.message.lines().next().unwrap_or("");
    if at.is_empty() {
        format!("{}: {first}", severity_name(d.severity))
    } else {
        format!("{at}: {}: {first}", severity_name(d.severity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(code: Option<&str>, message: &str) -> Diagnostic {
        Diagnostic {
            file: "calc_test.go".into(),
            line: 7,
            column: 0,
            severity: Severity::Error,
            code: code.map(String::from),
            message: message.into(),
        }
    }

    #[test]
    fn a_failing_tests_name_is_read_from_the_runners_convention() {
        let t = Some(TEST_FAILURE);
        for (code, message, name) in [
            (
                t,
                "test TestAdd failed: Add(1, 2) = -1, want 3",
                Some("TestAdd"),
            ),
            (t, "test TestAdd failed", Some("TestAdd")),
            (
                t,
                "test tests/test_calc.py::test_add failed: assert -1 == 3",
                Some("tests/test_calc.py::test_add"),
            ),
            (
                t,
                "test calc > failed builds > adds failed: expected 3\nmore",
                Some("calc > failed builds > adds"),
            ),
            (t, "TestAdd failed", None),
            (t, "test  failed", None),
            (Some("E0308"), "test TestAdd failed: x", None),
            (None, "test TestAdd failed: x", None),
        ] {
            let diag = d(code, message);
            assert_eq!(test_name(&diag), name, "{message}");
            assert_eq!(diagnostic_json(&diag)["test"].as_str(), name);
        }
    }
}
