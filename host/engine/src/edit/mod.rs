//! The host side of editing: reading files through a cap-std `Dir` rooted at the workspace (so
//! a path an LLM invents cannot leave it), stale-read checks, and applying a whole LLM response
//! atomically: every file's edits are validated in memory first, then all files are written
//! (temporary file + rename) or none, under an intent journal ([`journal`]) that makes the
//! apply all-or-nothing even when kiln is killed half-way. Every write goes through the one
//! [`writer::Writer`].

mod beneath;
mod error;
pub mod guard;
pub mod journal;
pub mod refactor;
mod window;
mod workspace;
pub mod writer;

pub use error::EditError;
pub use guard::CheckGuard;
pub use kiln_protocol::edit::EditResult;
pub use workspace::Workspace;

use crate::plugin::{EditKind, EditOutcome, EditStatus, FailureKind, FileEdit, Plugin};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A short fingerprint of a file's content, used for stale-read checks.
pub fn fingerprint(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..12])
}

/// Options for [`apply_response`].
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Validate and report, but write nothing.
    pub dry_run: bool,
    /// Fingerprints of the files as the LLM was shown them; a file that changed since is stale.
    pub shown: BTreeMap<String, String>,
    /// Paths no edit may create, change, delete or rename onto (kiln.toml, .kiln/, .git/ are
    /// always among them).
    pub protected: crate::path::Protected,
    /// At most this many files (Move-to destinations included) may change; an answer over
    /// it is refused whole, as policy (`kiln fix --max-files` in project mode).
    pub max_files: Option<usize>,
    /// In a fix loop, what the model may not change because it decides success (the check's
    /// files, the failing tests); refused whole as `check`, which the loop tells the model.
    pub guard: CheckGuard,
}

/// A parse error of the response.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ParseProblem {
    /// 1-based response line (0: not tied to a line).
    pub line: u32,
    /// What is wrong with the line.
    pub message: String,
}

impl ParseProblem {
    /// ` at line N`, or nothing when the problem is not tied to a line.
    pub fn at(&self) -> String {
        if self.line > 0 {
            format!(" at line {}", self.line)
        } else {
            String::new()
        }
    }
}

/// The outcome of applying a response.
#[derive(Debug, Clone, Serialize, Default)]
pub struct EditReport {
    /// True when every edit applied (or was already applied) and, unless a dry run, was written.
    pub ok: bool,
    /// Nothing was written because this was a dry run.
    pub dry_run: bool,
    /// Parse errors (then there are no edits).
    pub parse_errors: Vec<ParseProblem>,
    /// Every edit in response order.
    pub edits: Vec<EditResult>,
    /// Files written (created or changed), in order.
    pub written: Vec<String>,
    /// Files deleted.
    pub deleted: Vec<String>,
}

impl EditReport {
    /// Number of edits that changed something.
    pub fn applied_count(&self) -> usize {
        self.edits.iter().filter(|e| e.status == "applied").count()
    }

    /// One message for an LLM describing every problem, or `None` when all applied.
    pub fn feedback(&self) -> Option<String> {
        let mut parts: Vec<String> = self
            .parse_errors
            .iter()
            .map(|p| {
                if p.line > 0 {
                    format!("line {}: {}", p.line, p.message)
                } else {
                    p.message.clone()
                }
            })
            .collect();
        parts.extend(
            self.edits
                .iter()
                .filter_map(|e| e.error.as_ref().map(|m| format!("{}: {m}", e.path))),
        );
        if parts.is_empty() {
            None
        } else {
            Some(parts.join("\n\n"))
        }
    }
}

/// The WIT name of an edit kind.
pub fn kind_name(k: EditKind) -> &'static str {
    match k {
        EditKind::Replace => "replace",
        EditKind::Create => "create",
        EditKind::Rewrite => "rewrite",
        EditKind::Delete => "delete",
        EditKind::Rename => "rename",
    }
}

/// One name per file for a path an answer gives: empty and `.` components dropped
/// (`src//main.c`, `./src/main.c` and `src/./main.c` are all `src/main.c`), so two spellings of
/// a file are one file to the grouping, the stale check, `--max-files` and the targets. `..`
/// and a leading `/` stay, for the refusals that name them; a path of nothing else is kept as
/// given.
pub fn edit_path(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.is_empty() {
        return p.to_string();
    }
    let joined = parts.join("/");
    if p.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Parse `response` with `format`; parse errors come back as `Err`. Each edit's path (and
/// Move-to destination) is given one name per file ([`edit_path`]).
pub async fn parse(
    format: &Plugin,
    response: &str,
    targets: &[String],
) -> Result<Result<Vec<FileEdit>, Vec<ParseProblem>>, EditError> {
    Ok(format
        .format_parse(response, targets)
        .await?
        .map(|edits| {
            edits
                .into_iter()
                .map(|mut e| {
                    e.path = edit_path(&e.path);
                    e.new_path = e.new_path.as_deref().map(edit_path);
                    e
                })
                .collect()
        })
        .map_err(|errs| {
            errs.into_iter()
                .map(|e| ParseProblem {
                    line: e.line,
                    message: e.message,
                })
                .collect()
        }))
}

/// Parse and apply a whole LLM response: all files or none.
pub async fn apply_response(
    format: &Plugin,
    ws: &Workspace,
    response: &str,
    targets: &[String],
    opts: &ApplyOptions,
) -> Result<EditReport, EditError> {
    let mut report = EditReport {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    let edits = match parse(format, response, targets).await? {
        Ok(e) => e,
        Err(problems) => {
            report.parse_errors = problems;
            return Ok(report);
        }
    };
    apply_edits(format, ws, edits, targets, opts, report).await
}

/// Apply parsed edits: validate everything in memory, then write all files or none.
pub async fn apply_edits(
    format: &Plugin,
    ws: &Workspace,
    edits: Vec<FileEdit>,
    targets: &[String],
    opts: &ApplyOptions,
    mut report: EditReport,
) -> Result<EditReport, EditError> {
    report.edits = edits
        .iter()
        .map(|e| EditResult {
            path: e.path.clone(),
            kind: kind_name(e.kind),
            status: "not_applied",
            tier: None,
            failure: None,
            error: None,
            new_path: e.new_path.clone(),
        })
        .collect();
    let (groups, mut failed) = group_allowed(ws, &edits, targets, opts, &mut report);
    if let Some(max) = opts.max_files {
        let mut files: Vec<&str> = edits.iter().map(|e| e.path.as_str()).collect();
        files.extend(edits.iter().filter_map(|e| e.new_path.as_deref()));
        files.sort_unstable();
        files.dedup();
        if files.len() > max {
            let all: Vec<usize> = (0..edits.len()).collect();
            let message = format!(
                "the answer changes {} files, more than the {max} one answer may change (--max-files); nothing was applied",
                files.len()
            );
            fail_edits(&mut report, &all, "policy", &message);
            return Ok(report);
        }
    }
    // Compute every file's new state in memory.
    let mut plan: Vec<Planned> = Vec::new();
    for (path, idx) in &groups {
        match plan_file(format, ws, opts, path, idx, &edits, &mut report).await? {
            Some(p) => plan.push(p),
            None => failed = true,
        }
    }
    if failed {
        for r in &mut report.edits {
            if r.status == "applied" || r.status == "already_applied" {
                r.status = "not_applied";
            }
        }
        return Ok(report);
    }
    report.ok = true;
    if opts.dry_run {
        return Ok(report);
    }
    commit_plan(&ws.writer(&opts.protected, targets), &plan, &mut report)?;
    Ok(report)
}

/// One file's new state, computed in memory before anything is written.
struct Planned {
    path: String,
    original: Option<String>,
    new: Option<String>,
    move_to: Option<String>,
}

/// Mark edits `idx` of `report` failed with `failure` and `message`.
fn fail_edits(report: &mut EditReport, idx: &[usize], failure: &'static str, message: &str) {
    for &i in idx {
        let r = &mut report.edits[i];
        r.status = "failed";
        r.failure = Some(failure);
        r.error = Some(message.to_string());
    }
}

/// Group edit indices by file, in first-appearance order (each file's edits keep their
/// order), leaving out the edits policy refuses (protected paths, files outside `targets`;
/// and, as `check`, the files `opts.guard` says define the check),
/// which are marked failed in `report`. True when any was refused.
fn group_allowed(
    ws: &Workspace,
    edits: &[FileEdit],
    targets: &[String],
    opts: &ApplyOptions,
    report: &mut EditReport,
) -> (Vec<(String, Vec<usize>)>, bool) {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    let mut failed = false;
    let writer = ws.writer(&opts.protected, targets);
    for (i, e) in edits.iter().enumerate() {
        // The source and the Move-to destination alike: protected, targets, links.
        let policy = writer
            .refuse(&e.path)
            .or_else(|| e.new_path.as_deref().and_then(|d| writer.refuse(d)));
        if let Some(message) = policy {
            fail_edits(report, &[i], "policy", &message);
            failed = true;
            continue;
        }
        let check = opts.guard.refuse_path(&e.path).or_else(|| {
            e.new_path
                .as_deref()
                .and_then(|d| opts.guard.refuse_path(d))
        });
        if let Some(message) = check {
            fail_edits(report, &[i], "check", &message);
            failed = true;
            continue;
        }
        match groups.iter_mut().find(|(p, _)| *p == e.path) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((e.path.clone(), vec![i])),
        }
    }
    (groups, failed)
}

/// Read one file, check it was not changed since it was shown, and apply its edits `idx` with
/// `format` in memory. `None` when the file's edits fail (marked in `report`).
async fn plan_file(
    format: &Plugin,
    ws: &Workspace,
    opts: &ApplyOptions,
    path: &str,
    idx: &[usize],
    edits: &[FileEdit],
    report: &mut EditReport,
) -> Result<Option<Planned>, EditError> {
    // A target that cannot be read (it leads outside, is not a regular file, is not text)
    // refuses the edit like any other policy: reported, nothing written.
    let original = match ws.read(path) {
        Ok(o) => o,
        Err(EditError::Io { message, .. }) => {
            fail_edits(report, idx, "policy", &format!("{path}: {message}"));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if let (Some(seen), Some(now)) = (opts.shown.get(path), &original)
        && *seen != fingerprint(now)
    {
        let message = format!(
            "{path} changed since you were shown it; re-read it and make the edit against its current content"
        );
        fail_edits(report, idx, "stale", &message);
        return Ok(None);
    }
    let file_edits: Vec<FileEdit> = idx.iter().map(|&i| edits[i].clone()).collect();
    let windowed = match original.as_deref() {
        Some(text) => window::apply(format, path, text, &file_edits).await,
        None => None,
    };
    let result = match windowed {
        Some(r) => r,
        None => {
            format
                .format_apply(path, original.as_deref(), &file_edits)
                .await
        }
    };
    let applied = match result? {
        Ok(applied) => applied,
        Err(f) => {
            let i = idx[(f.index as usize).min(idx.len() - 1)];
            fail_edits(report, &[i], failure_name(&f.kind), &f.message);
            return Ok(None);
        }
    };
    mark_applied(report, idx, &applied.outcomes);
    let move_to = file_edits
        .iter()
        .rev()
        .find(|e| e.kind == EditKind::Rename)
        .and_then(|e| e.new_path.clone());
    // Moved away, the file no longer holds its tests where the check looks.
    let stays = applied.text.as_deref().filter(|_| move_to.is_none());
    if let Some(message) = opts.guard.refuse_change(path, original.as_deref(), stays) {
        fail_edits(report, idx, "check", &message);
        return Ok(None);
    }
    if let Some(dest) = &move_to
        && let Some((failure, message)) = move_refusal(ws, path, dest)?
    {
        fail_edits(report, &[idx[idx.len() - 1]], failure, &message);
        return Ok(None);
    }
    Ok(Some(Planned {
        path: path.to_string(),
        original,
        new: applied.text,
        move_to,
    }))
}

/// The report's name for why a format could not apply an edit.
fn failure_name(kind: &FailureKind) -> &'static str {
    match kind {
        FailureKind::NoMatch => "no_match",
        FailureKind::Ambiguous => "ambiguous",
        FailureKind::Invalid => "invalid",
    }
}

/// Record in `report` how each edit `idx` of a file applied (`outcomes` in the same order).
fn mark_applied(report: &mut EditReport, idx: &[usize], outcomes: &[EditOutcome]) {
    for (k, &i) in idx.iter().enumerate() {
        let r = &mut report.edits[i];
        if let Some(o) = outcomes.get(k) {
            r.status = match o.status {
                EditStatus::Applied => "applied",
                EditStatus::AlreadyApplied => "already_applied",
            };
            r.tier = o.tier.clone();
        }
    }
}

/// Why `path` cannot be moved to `dest` (it exists, or cannot be read), as a failure kind and
/// a message; `None` when it can.
fn move_refusal(
    ws: &Workspace,
    path: &str,
    dest: &str,
) -> Result<Option<(&'static str, String)>, EditError> {
    match ws.read(dest) {
        Ok(None) => Ok(None),
        Ok(Some(_)) => Ok(Some((
            "invalid",
            format!("cannot move {path} to {dest}: {dest} already exists"),
        ))),
        Err(EditError::Io { message, .. }) => Ok(Some((
            "policy",
            format!("cannot move {path} to {dest}: {dest}: {message}"),
        ))),
        Err(e) => Err(e),
    }
}

/// Commit `plan` under the journal: writes first (temporary file + rename each), then moves'
/// removals and deletions; all or nothing, even if kiln is killed half-way. Records the
/// written and deleted paths in `report`.
fn commit_plan(
    writer: &writer::Writer<'_>,
    plan: &[Planned],
    report: &mut EditReport,
) -> Result<(), EditError> {
    let mut changes: Vec<journal::Change<'_>> = Vec::new();
    for p in plan {
        let dest = p.move_to.as_deref().unwrap_or(&p.path);
        if let Some(text) = &p.new
            && (p.move_to.is_some() || p.original.as_deref() != Some(text.as_str()))
        {
            changes.push(journal::Change::Write {
                path: dest,
                text,
                before: if p.move_to.is_some() {
                    None
                } else {
                    p.original.as_deref()
                },
                mode: None,
            });
            report.written.push(dest.to_string());
        }
    }
    for p in plan {
        if p.new.is_none() || p.move_to.is_some() {
            changes.push(journal::Change::Remove {
                path: &p.path,
                before: p.original.as_deref(),
            });
            report.deleted.push(p.path.clone());
        }
    }
    writer.commit(&changes)
}

/// An edit response applied as a tool's result: `(text for the model, is_error, files
/// written or deleted)` (write_patch, MCP's apply_edit).
pub async fn apply_as_tool_result(
    tool: &str,
    format: &Plugin,
    ws: &Workspace,
    response: &str,
    targets: &[String],
    opts: &ApplyOptions,
    timeout: std::time::Duration,
) -> (String, bool, Vec<String>) {
    // A built-in format's first use compiles it: not the tool's time.
    let _ = format.link().await;
    let fut = apply_response(format, ws, response, targets, opts);
    report_as_tool_result(tool, tokio::time::timeout(timeout, fut).await, timeout)
}

/// Create `path` or overwrite it whole with `content`, through the same protected, atomic
/// path as every edit (write_file).
pub async fn write_whole_file(
    format: &Plugin,
    ws: &Workspace,
    path: &str,
    content: &str,
    opts: &ApplyOptions,
    timeout: std::time::Duration,
) -> (String, bool, Vec<String>) {
    let _ = format.link().await;
    let fut = write_whole(format, ws, path, content, opts);
    report_as_tool_result(
        "write_file",
        tokio::time::timeout(timeout, fut).await,
        timeout,
    )
}

/// [`write_whole_file`]'s report, for a caller that classifies it itself (the agent's
/// write_file tells a refused write from a failed one by each edit's `failure`).
pub async fn write_whole(
    format: &Plugin,
    ws: &Workspace,
    path: &str,
    content: &str,
    opts: &ApplyOptions,
) -> Result<EditReport, EditError> {
    // Whether it exists decides the kind; the edit path does the real checks.
    let exists = ws.dir().symlink_metadata(path).is_ok();
    let edit = FileEdit {
        path: path.to_string(),
        kind: if exists {
            EditKind::Rewrite
        } else {
            EditKind::Create
        },
        search: String::new(),
        replace: content.to_string(),
        new_path: None,
    };
    let targets = [path.to_string()];
    let report = EditReport {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    apply_edits(format, ws, vec![edit], &targets, opts, report).await
}

fn report_as_tool_result(
    tool: &str,
    r: Result<Result<EditReport, EditError>, tokio::time::error::Elapsed>,
    timeout: std::time::Duration,
) -> (String, bool, Vec<String>) {
    match r {
        Err(_) => (
            format!("{tool} timed out after {} s", timeout.as_secs_f64()),
            true,
            Vec::new(),
        ),
        Ok(Err(e)) => (e.to_string(), true, Vec::new()),
        Ok(Ok(report)) => {
            let text = serde_json::to_string(&report).unwrap_or_default();
            if report.ok {
                let changed = report
                    .written
                    .iter()
                    .chain(&report.deleted)
                    .cloned()
                    .collect();
                (text, false, changed)
            } else {
                (report.feedback().unwrap_or(text), true, Vec::new())
            }
        }
    }
}
