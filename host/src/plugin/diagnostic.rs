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
