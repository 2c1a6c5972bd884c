//! Reading what the phases report: the execution report's `STATUS:` line and `NEXT STEPS:`
//! items, the harness's own summary of a phase (from its structured tool calls, not from its
//! prose), and the reviewer's `submit_review` verdict.

use crate::engine::tool_names::{
    READ_FILE, READ_FILES, RUN_CMD, SUBMIT_REVIEW, WRITE_FILE, WRITE_PATCH,
};
use crate::engine::tools::submit_review::SubmitReviewArgs;
use kiln_protocol::outcome::{
    AgentResult, CallStatus, CommandRun, LoopSummary, ReportStatus, ToolCallRecord,
};
use serde::Serialize;
use serde_json::Value;

/// The reviewer's verdict, as written to review_output.toml.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReviewOutput {
    /// The round (1-based) this verdict closes.
    #[serde(rename = "loop")]
    pub round: u32,
    /// What actually happened.
    pub summary: String,
    /// Something only a person can resolve; empty when none.
    pub blocker: String,
    /// Items still to do.
    pub pending: Vec<PendingItem>,
}

/// A pending item (`[[pending]] item = "..."`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PendingItem {
    /// What remains.
    pub item: String,
}

/// `STATUS: COMPLETE|INCOMPLETE` in an execution report (markdown emphasis tolerated).
pub fn extract_status(report: &str) -> Option<ReportStatus> {
    report.lines().find_map(|l| {
        let l = l
            .trim()
            .trim_matches(|c| c == '*' || c == '#' || c == '_' || c == ' ');
        let rest = l
            .strip_prefix("STATUS:")
            .or_else(|| l.strip_prefix("Status:"))?;
        let word: String = rest
            .trim()
            .trim_matches(|c| c == '*' || c == '_' || c == '`')
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        match word.to_ascii_uppercase().as_str() {
            "COMPLETE" => Some(ReportStatus::Complete),
            "INCOMPLETE" => Some(ReportStatus::Incomplete),
            _ => None,
        }
    })
}

/// The items listed under `NEXT STEPS:` (bullets or numbers, up to a blank line or the next
/// heading).
pub fn extract_pending_items(report: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut inside = false;
    for line in report.lines() {
        let t = line.trim();
        let bare = t.trim_matches(|c| c == '*' || c == '#' || c == '_').trim();
        if bare.to_ascii_uppercase().starts_with("NEXT STEPS:") {
            inside = true;
            let after = bare["NEXT STEPS:".len()..].trim();
            if !after.is_empty() {
                items.push(after.to_string());
            }
            continue;
        }
        if !inside {
            continue;
        }
        if t.is_empty() {
            if !items.is_empty() {
                break;
            }
            continue;
        }
        let item = t
            .strip_prefix("- ")
            .or_else(|| t.strip_prefix("* "))
            .or_else(|| {
                let digits = t.find(|c: char| !c.is_ascii_digit())?;
                (digits > 0).then(|| t[digits..].trim_start_matches(['.', ')']).trim_start())
            });
        match item {
            Some(i) if !i.is_empty() => items.push(i.to_string()),
            _ => break,
        }
    }
    items
}

fn push_unique(v: &mut Vec<String>, x: &str) {
    if !x.is_empty() && !v.iter().any(|y| y == x) {
        v.push(x.to_string());
    }
}

/// Build the harness's summary of a phase from its structured result.
pub fn summarize(round: u32, r: &AgentResult) -> LoopSummary {
    let mut s = LoopSummary {
        round,
        tokens: r.usage,
        stop_reason: Some(r.stop_reason),
        status: extract_status(&r.content),
        ..Default::default()
    };
    for c in &r.tool_calls {
        if c.status == CallStatus::Refused {
            s.refused.push(format!(
                "{} {}: {}",
                c.name,
                c.arguments.chars().take(200).collect::<String>(),
                c.output.lines().next().unwrap_or("")
            ));
            continue;
        }
        note_call(&mut s, c);
        if !c.ok {
            s.errors.push(format!(
                "{}: {}",
                c.name,
                c.output
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
    }
    s
}

/// What one (not refused) call adds to the summary: files written, edited or read, commands
/// run.
fn note_call(s: &mut LoopSummary, c: &ToolCallRecord) {
    let args: Value = serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
    let path = args["path"].as_str().unwrap_or("");
    match c.name.as_str() {
        WRITE_FILE if c.ok => push_unique(&mut s.files_written, path),
        n if c.ok && (n == WRITE_PATCH || n == crate::edit::refactor::TOOL) => {
            push_unique(&mut s.files_edited, path)
        }
        READ_FILE if c.ok => push_unique(&mut s.files_read, path),
        READ_FILES if c.ok => {
            for p in args["paths"].as_array().into_iter().flatten() {
                push_unique(&mut s.files_read, p.as_str().unwrap_or(""));
            }
        }
        RUN_CMD => {
            let mut command = args["command"].as_str().unwrap_or("").to_string();
            for a in args["args"].as_array().into_iter().flatten() {
                command.push(' ');
                command.push_str(a.as_str().unwrap_or(""));
            }
            let exit_code = serde_json::from_str::<Value>(&c.output)
                .ok()
                .and_then(|v| v["exit_code"].as_i64());
            s.commands_run.push(CommandRun { command, exit_code });
        }
        _ => {}
    }
}

/// The reviewer's last `submit_review` call, if it made one.
pub(super) fn submitted_review(review: &AgentResult) -> Option<SubmitReviewArgs> {
    review
        .tool_calls
        .iter()
        .rev()
        .find(|c| c.name == SUBMIT_REVIEW)
        .and_then(|c| serde_json::from_str::<SubmitReviewArgs>(&c.arguments).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_next_steps_are_parsed() {
        let r = "Plan: x\n**STATUS: INCOMPLETE**\nChecks:\n```\nok\n```\nNEXT STEPS:\n- write tests\n2. update docs\n\ntrailing";
        assert_eq!(extract_status(r), Some(ReportStatus::Incomplete));
        assert_eq!(extract_pending_items(r), ["write tests", "update docs"]);
        assert_eq!(
            extract_status("STATUS: COMPLETE"),
            Some(ReportStatus::Complete)
        );
        assert_eq!(
            extract_status("Status: `complete`"),
            Some(ReportStatus::Complete)
        );
        assert_eq!(extract_status("no status here"), None);
        assert_eq!(extract_status("STATUS: DONE"), None);
        assert!(extract_pending_items("STATUS: COMPLETE").is_empty());
    }

    #[test]
    fn refusals_are_told_apart_by_type_not_by_text() {
        let call = |name: &str, ok: bool, status: CallStatus, output: &str| ToolCallRecord {
            turn: 1,
            name: name.into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
            ok,
            status,
            output: output.into(),
        };
        let r = AgentResult {
            content: String::new(),
            error: None,
            messages: vec![],
            tool_calls: vec![
                call(WRITE_FILE, false, CallStatus::Refused, "whatever it says"),
                // A failure whose text mentions a denial is still a failure.
                call(READ_FILE, false, CallStatus::Failed, "permission denied"),
                call(WRITE_PATCH, true, CallStatus::Ok, "{}"),
            ],
            usage: Default::default(),
            turns: 1,
            stop_reason: crate::engine::StopReason::Complete,
            success: true,
            loop_id: 1,
            changed_files: vec![],
        };
        let s = summarize(1, &r);
        assert_eq!(s.refused.len(), 1, "{:?}", s.refused);
        assert_eq!(s.errors, ["read_file: permission denied"]);
        assert_eq!(s.files_edited, ["a.txt"]);
    }
}
