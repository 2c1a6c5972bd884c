//! What each phase of the execute/review loop is told and offered: the shared policy, the
//! execution and review system prompts, each round's task prompt (the loop's progress so far,
//! the pending items, the verified actions and refused calls), and each phase's tools, caps
//! and command allowlist.

use super::task::Task;
use crate::engine::agent::AgentOptions;
use crate::engine::command_policy::REVIEW_COMMANDS;
use crate::engine::tool_names::{
    FINAL_ANSWER, GLOB, LIST_DIR, READ_FILE, READ_FILES, RUN_CMD, SEARCH, SEARCH_REPO,
    SUBMIT_REVIEW, WRITE_FILE, WRITE_PATCH,
};
use kiln_protocol::outcome::LoopSummary;

const SYSTEM_POLICY: &str = "You are working in a repository to complete a task, in bounded sessions.\n\
Rules:\n\
- Never fabricate file contents, command output or test results: determine the state of the work with the tools, not by assumption.\n\
- Stay inside the workspace: use paths relative to its root.\n\
- Batch independent reads early (read_files, glob, search); prefer doing the work directly over repeated exploration.\n\
- Validate after every meaningful change with run_cmd when a check is available.\n\
- Use write_patch for targeted changes and write_file for new files or whole rewrites.\n";

fn execution_policy() -> String {
    format!(
        "{SYSTEM_POLICY}\nComplete as much of the task as you can in this session. When done, call final_answer with a report that contains:\n\
STATUS: COMPLETE or STATUS: INCOMPLETE\n\
the plan you followed,\n\
the exact output of the checks you ran,\n\
and, when incomplete, a section `NEXT STEPS:` listing what remains, one item per line starting with `- `.\n"
    )
}

fn review_policy() -> String {
    let commands = REVIEW_COMMANDS.join(", ");
    format!(
        "{SYSTEM_POLICY}\nYou are the reviewer of another agent's session. You cannot change files. Check the work with the tools (read, glob, search, and run_cmd limited to {commands}). Calls that were refused had no effect and are unverified. Then call submit_review with: a summary of what actually happened, a blocker (only something a person must resolve; otherwise empty) and the pending items still to do (empty when the task is complete).\n"
    )
}

/// The execution prompt: the task in round 1; in later rounds, the loop context.
pub(super) fn execution_task(
    round: u32,
    loops: u32,
    task_file: &str,
    task: &Task,
    rounds: &[LoopSummary],
    pending: &[String],
    blocker: &str,
) -> String {
    let mut p = format!(
        "Round {round} of at most {}. The task file is {} (its content is below; do not re-read it).\n\n## Task\n{}\n",
        loops, task_file, task.text
    );
    if round > 1 {
        p.push_str("\n## Progress so far (verified by the harness)\nDo not re-read the task file or re-glob the workspace just for orientation.\n");
        let all = |f: fn(&LoopSummary) -> &Vec<String>| {
            let mut v: Vec<String> = Vec::new();
            for r in rounds {
                for x in f(r) {
                    if !v.contains(x) {
                        v.push(x.clone());
                    }
                }
            }
            v
        };
        let created = all(|r| &r.files_written);
        let edited = all(|r| &r.files_edited);
        p.push_str(&format!(
            "- rounds completed: {}\n- files created: {}\n- files edited: {}\n",
            rounds.len(),
            list_or_none(&created),
            list_or_none(&edited)
        ));
        if let Some(last) = rounds.last() {
            let cmds: Vec<String> = last
                .commands_run
                .iter()
                .map(|c| match c.exit_code {
                    Some(code) => format!("`{}` (exit {code})", c.command),
                    None => format!("`{}`", c.command),
                })
                .collect();
            p.push_str(&format!(
                "- last round's commands: {}\n- last round's errors: {}\n",
                list_or_none(&cmds),
                list_or_none(&last.errors)
            ));
        }
    }
    if !pending.is_empty() {
        p.push_str("\n## Pending items\n");
        for i in pending {
            p.push_str(&format!("- {i}\n"));
        }
    }
    if !blocker.trim().is_empty() {
        p.push_str(&format!(
            "\n## Blocker named by the last review\n{}\nResolve it if the tools allow; otherwise do what you can around it and say in your report what still needs a person.\n",
            blocker.trim()
        ));
    }
    p
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The review prompt: verified actions, refused calls, the execution report.
pub(super) fn review_task(round: u32, summary: &LoopSummary, report: &str, task: &Task) -> String {
    let mut p = format!(
        "Review round {round} of the task below.\n\n## Task\n{}\n\n## Verified actions (computed by the harness)\n",
        task.text
    );
    p.push_str(&format!(
        "- files created: {}\n- files edited: {}\n- files read: {}\n",
        list_or_none(&summary.files_written),
        list_or_none(&summary.files_edited),
        list_or_none(&summary.files_read)
    ));
    for c in &summary.commands_run {
        p.push_str(&format!(
            "- ran `{}`{}\n",
            c.command,
            c.exit_code
                .map(|e| format!(" (exit {e})"))
                .unwrap_or_default()
        ));
    }
    p.push_str("\n## Refused calls (attempted, no effect, unverified)\n");
    if summary.refused.is_empty() {
        p.push_str("none\n");
    }
    for r in &summary.refused {
        p.push_str(&format!("- {r}\n"));
    }
    p.push_str(&format!(
        "\n## The execution agent's report\n{}\n\nCall submit_review when done.\n",
        if report.trim().is_empty() {
            "(no report)"
        } else {
            report.trim()
        }
    ));
    p
}

/// The review phase's turn budget: half the execution's, at least 6.
pub(super) fn review_budget(iterations: u32) -> u32 {
    (iterations / 2).max(6)
}

/// The execution agent: the loop's budget, the file tools, the writes, `run_cmd` limited to
/// the granted programs and the task's `bash` list.
pub(super) fn execution_options(
    base: &AgentOptions,
    iterations: u32,
    granted: &[String],
    task: &Task,
    parent: i64,
) -> AgentOptions {
    let mut allow = granted.to_vec();
    for b in &task.bash {
        if !allow.contains(b) {
            allow.push(b.clone());
        }
    }
    AgentOptions {
        max_steps: iterations,
        max_writes: iterations.max(base.max_writes),
        max_commands: iterations.max(base.max_commands),
        system_prompt: Some(execution_policy()),
        only_tools: Some(
            [
                READ_FILE,
                READ_FILES,
                LIST_DIR,
                GLOB,
                SEARCH,
                SEARCH_REPO,
                WRITE_FILE,
                WRITE_PATCH,
                RUN_CMD,
                FINAL_ANSWER,
            ]
            .map(String::from)
            .to_vec(),
        ),
        command_allowlist: Some(allow),
        kind: crate::store::RunKind::LoopExecute,
        parent: Some(parent),
        ..base.clone()
    }
}

/// The review agent: a smaller budget, no writes, the read-only command list, and programs
/// that may write nowhere.
pub(super) fn review_options(base: &AgentOptions, iterations: u32, parent: i64) -> AgentOptions {
    let budget = review_budget(iterations);
    AgentOptions {
        max_steps: budget,
        max_writes: 0,
        max_commands: budget,
        system_prompt: Some(review_policy()),
        only_tools: Some(
            [
                READ_FILE,
                READ_FILES,
                LIST_DIR,
                GLOB,
                SEARCH,
                SEARCH_REPO,
                RUN_CMD,
                SUBMIT_REVIEW,
            ]
            .map(String::from)
            .to_vec(),
        ),
        command_allowlist: Some(REVIEW_COMMANDS.map(String::from).to_vec()),
        // The kernel holds what the argument checks only defend: the review writes nowhere.
        program_writes: crate::plugin::confine::Writes::Nowhere,
        kind: crate::store::RunKind::LoopReview,
        parent: Some(parent),
        ..base.clone()
    }
}
