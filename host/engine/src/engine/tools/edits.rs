//! An edit report as a tool's outcome, shared by the tools that write through the host's
//! edit path: written files are noted, a refusal by the edit policy (a protected path, a
//! path leading out of the workspace) is told apart from an edit that did not apply.

use super::caps::Changes;
use crate::edit::{EditError, EditReport};
use kiln_protocol::outcome::ToolOutcome;
use std::time::Duration;

/// The failure an edit policy refusal carries in the report.
const POLICY: &str = "policy";

/// The outcome of an edit made under `timeout` by `tool` (the edit report as JSON when it
/// applied, its feedback otherwise).
pub(crate) fn edit_outcome(
    tool: &str,
    r: Result<Result<EditReport, EditError>, tokio::time::error::Elapsed>,
    timeout: Duration,
    changed: &mut Changes,
) -> ToolOutcome {
    let report = match r {
        Err(_) => {
            return ToolOutcome::Failed(format!(
                "{tool} timed out after {} s",
                timeout.as_secs_f64()
            ));
        }
        Ok(Err(e)) => return ToolOutcome::Failed(e.to_string()),
        Ok(Ok(report)) => report,
    };
    let text = serde_json::to_string(&report).unwrap_or_default();
    if report.ok {
        changed.note(
            report
                .written
                .iter()
                .chain(&report.deleted)
                .cloned()
                .collect(),
        );
        return ToolOutcome::Ok(text);
    }
    let feedback = report.feedback().unwrap_or(text);
    if report.edits.iter().any(|e| e.failure == Some(POLICY)) {
        ToolOutcome::Refused(feedback)
    } else {
        ToolOutcome::Failed(feedback)
    }
}

/// The edit format named by a call (or the default), as a failed call when it is missing.
pub(crate) fn format<'r>(
    registry: &'r crate::plugin::Registry,
    name: &str,
) -> Result<&'r crate::plugin::Plugin, ToolOutcome> {
    registry
        .get(name, Some(crate::plugin::PluginKind::EditFormat))
        .map_err(|e| ToolOutcome::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::EditResult;

    fn failed(failure: &'static str) -> EditResult {
        EditResult {
            path: "kiln.toml".into(),
            kind: "rewrite",
            status: "failed",
            tier: None,
            failure: Some(failure),
            error: Some("kiln.toml: protected".into()),
            new_path: None,
        }
    }

    fn outcome(report: EditReport, changed: &mut Changes) -> ToolOutcome {
        edit_outcome(
            "write_file",
            Ok(Ok(report)),
            Duration::from_secs(1),
            changed,
        )
    }

    #[test]
    fn a_policy_failure_is_a_refusal_and_other_failures_are_not() {
        let mut changed = Changes::default();
        let refused = EditReport {
            edits: vec![failed(POLICY)],
            ..Default::default()
        };
        assert!(matches!(
            outcome(refused, &mut changed),
            ToolOutcome::Refused(t) if t.contains("protected")
        ));
        let no_match = EditReport {
            edits: vec![failed("no_match")],
            ..Default::default()
        };
        assert!(matches!(
            outcome(no_match, &mut changed),
            ToolOutcome::Failed(_)
        ));
        assert_eq!(changed.writes, 0);
        let ok = EditReport {
            ok: true,
            written: vec!["a.txt".into()],
            ..Default::default()
        };
        assert!(matches!(outcome(ok, &mut changed), ToolOutcome::Ok(_)));
        assert_eq!(
            (changed.writes, changed.files.clone()),
            (1, vec!["a.txt".to_string()])
        );
    }
}
