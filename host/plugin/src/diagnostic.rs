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

/// A diagnostic as JSON with WIT names.
pub fn diagnostic_json(d: &Diagnostic) -> serde_json::Value {
    serde_json::json!({
        "file": d.file, "line": d.line, "column": d.column, "severity": severity_name(d.severity),
        "code": d.code, "message": d.message,
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
