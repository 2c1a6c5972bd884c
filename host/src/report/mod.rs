//! What `kiln report` shows about one run, gathered from the store: its row, and a timeline
//! of steps (a fix loop's iterations, an agent's turns), each with the runner's verdict and
//! diagnostics, the model's summary, the diffs applied, the tool calls with their outcome,
//! and the tokens and cost of its model requests; the stop reason last. [`html`] renders it
//! as one self-contained page.

pub mod batch;
pub mod html;

use crate::llm::Usage;
use crate::llm::pricing::{Price, cost_usd};
use crate::store::{IterationRow, LoopRow, Store, StoreError, ToolCallRow};
use std::collections::BTreeMap;

/// One diff applied during a step.
#[derive(Debug, Clone)]
pub struct Diff {
    /// Workspace-relative path.
    pub path: String,
    /// Unified diff, or for an agent's patch tools the patch it applied.
    pub text: String,
}

/// One step of the timeline.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Iteration or turn number.
    pub n: i64,
    /// The runner's result in this iteration (fix and loop runs).
    pub runner: Option<IterationRow>,
    /// What the model said it did (its summary, else the first lines of its answer).
    pub summary: Option<String>,
    /// Diffs applied.
    pub diffs: Vec<Diff>,
    /// Tool calls made.
    pub tools: Vec<ToolCallRow>,
    /// Tokens of the step's model requests.
    pub usage: Usage,
    /// Their cost in USD, when the model's price is known.
    pub cost: Option<f64>,
    /// Failed model requests, with their error.
    pub errors: Vec<String>,
}

/// A file a program the run started changed (as undo recorded it), beside the model's diffs.
#[derive(Debug, Clone)]
pub struct ProgramChange {
    /// Workspace-relative path.
    pub path: String,
    /// `created`, `changed` or `deleted`.
    pub what: &'static str,
    /// What it is when there is no diff to show: not a regular file, or too large to
    /// keep/compare (never read).
    pub note: Option<String>,
    /// A unified diff from its content before the run to what the run left, when both are
    /// text and the file still holds what the run left.
    pub diff: Option<String>,
}

/// A run as the report shows it.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's row.
    pub row: LoopRow,
    /// `iteration` (fix) or `turn` (agent, loop phases).
    pub step_word: &'static str,
    /// The timeline.
    pub steps: Vec<Step>,
    /// Cost of the whole run, when every model's price is known.
    pub cost: Option<f64>,
    /// When it was undone (`kiln undo`), if it was.
    pub undone_ms: Option<i64>,
    /// For an execute/review loop: its phases (each a run of its own), in order.
    pub phases: Vec<RunReport>,
    /// Files changed by programs the run started (see [`program_changes`]).
    pub program_changes: Vec<ProgramChange>,
}

impl RunReport {
    /// How many steps the run counts and what they are called, as the console, `history`
    /// and the page's header all say it: a fix loop's iterations (the first check is not
    /// one), an agent's turns, an execute/review loop's rounds.
    pub fn count(&self) -> (i64, &'static str) {
        let word = match (self.step_word, self.row.kind.as_str()) {
            (_, "loop") => "rounds",
            ("iteration", _) => "iterations",
            _ => "turns",
        };
        (self.row.iters, word)
    }
}

/// The phases of loop run `row` (`loop-execute`, `loop-review`): the runs begun while it
/// ran (one loop at a time runs on a workspace), in order.
pub fn phases_of(store: &Store, row: &LoopRow) -> Result<Vec<i64>, StoreError> {
    let end = row.ended_at.unwrap_or(i64::MAX);
    let mut ids: Vec<i64> = store
        .loops(10_000)?
        .into_iter()
        .filter(|r| {
            matches!(
                r.kind,
                crate::store::RunKind::LoopExecute | crate::store::RunKind::LoopReview
            ) && r.id > row.id
        })
        .filter(|r| r.started_at >= row.started_at && r.started_at <= end)
        .map(|r| r.id)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Gather run `id` from `store`, pricing tokens with `pricing` (the `[pricing]` table).
pub fn gather(
    store: &Store,
    id: i64,
    pricing: &BTreeMap<String, Price>,
) -> Result<RunReport, StoreError> {
    // `kiln report` is the user's (a batch report reads its tasks' checkouts' runs).
    let d = store.any_loop_detail(id)?;
    let tools = store.tool_calls(id)?;
    let events = store.events(id, None)?;
    let mut steps: BTreeMap<i64, Step> = BTreeMap::new();
    let mut total: Option<f64> = Some(0.0);
    for c in &d.llm_calls {
        let s = step(&mut steps, c.iteration);
        s.usage += c.tokens;
        let cost = cost_usd(&c.model, &c.tokens, pricing);
        s.cost = match (s.cost, cost) {
            (Some(a), Some(b)) => Some(a + b),
            (None, Some(b)) => Some(b),
            (a, None) => a,
        };
        total = total.zip(cost).map(|(a, b)| a + b);
        if let Some(e) = &c.error {
            s.errors.push(e.clone());
        } else if s.summary.is_none() && !c.response.trim().is_empty() {
            s.summary = Some(first_lines(&c.response, 6));
        } else if s.summary.is_none() {
            s.summary = final_call(&c.tool_calls);
        }
    }
    for it in &d.iterations {
        let s = step(&mut steps, it.n);
        if let Some(sum) = &it.llm_summary {
            s.summary = Some(sum.clone());
        }
        s.runner = Some(it.clone());
    }
    for t in tools {
        let s = step(&mut steps, t.turn);
        if let Some(diff) = patch_of(&t) {
            s.diffs.push(diff);
        }
        s.tools.push(t);
    }
    let mut undone_ms = None;
    for (_, kind, v) in &events {
        match kind.as_str() {
            "edit.diff" => {
                let n = v["iteration"].as_i64().unwrap_or(0);
                step(&mut steps, n).diffs.push(Diff {
                    path: v["path"].as_str().unwrap_or("").to_string(),
                    text: v["diff"].as_str().unwrap_or("").to_string(),
                });
            }
            "run.undone" => undone_ms = v["at"].as_i64(),
            _ => {}
        }
    }
    let step_word = if d.row.kind == "fix" {
        "iteration"
    } else {
        "turn"
    };
    let steps: Vec<Step> = steps.into_values().collect();
    let mut phases = Vec::new();
    if d.row.kind == "loop" {
        for p in phases_of(store, &d.row)? {
            let phase = gather(store, p, pricing)?;
            total = total.zip(phase.cost).map(|(a, b)| a + b);
            phases.push(phase);
        }
    }
    let any_calls = !d.llm_calls.is_empty() || !phases.is_empty();
    Ok(RunReport {
        cost: total.filter(|_| any_calls),
        program_changes: Vec::new(),
        phases,
        row: d.row,
        step_word,
        steps,
        undone_ms,
    })
}

/// Fill in `r.program_changes` from undo's record of the run in the workspace at `root`:
/// every file the run changed that no model diff of the report names (a formatter's
/// rewrite, a generated file, a build log). Nothing when the run has no undo record.
pub fn program_changes(r: &mut RunReport, root: &std::path::Path) {
    use crate::undo::backup::{Backups, NOT_REGULAR, TOO_LARGE};
    use crate::undo::{restore, scan};
    let Ok(rec) = restore::record(root, r.row.id) else {
        return;
    };
    let Ok(Some(b)) = Backups::open(root, false) else {
        return;
    };
    let pre = restore::PreImages::load(&b, root, &rec.changes);
    let model: std::collections::BTreeSet<&str> = r
        .steps
        .iter()
        .flat_map(|s| s.diffs.iter().map(|d| d.path.as_str()))
        .collect();
    let mut out = Vec::new();
    for c in &rec.changes {
        if model.contains(c.path.as_str()) {
            continue;
        }
        let what = match (&c.before, &c.after) {
            (None, _) => "created",
            (_, None) => "deleted",
            _ => "changed",
        };
        let note = c.after.as_deref().and_then(|a| {
            if a == NOT_REGULAR {
                return Some("not a regular file (a symbolic link, a FIFO, ...)".to_string());
            }
            let size = a.strip_prefix(TOO_LARGE)?.split(':').next()?;
            Some(format!("too large to keep/compare: {size} bytes"))
        });
        let before = match &c.before {
            Some(h) => pre.get(h).ok().and_then(|v| String::from_utf8(v).ok()),
            None => Some(String::new()),
        };
        let after = match &c.after {
            Some(h) => scan::read(root, &c.path)
                .ok()
                .filter(|v| scan::hash(v) == *h)
                .and_then(|v| String::from_utf8(v).ok()),
            None => Some(String::new()),
        };
        let shown = crate::terminal::path(&c.path);
        let diff = before.zip(after).map(|(old, new)| {
            let a = if c.before.is_some() {
                format!("a/{shown}")
            } else {
                "/dev/null".into()
            };
            let z = if c.after.is_some() {
                format!("b/{shown}")
            } else {
                "/dev/null".into()
            };
            similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .context_radius(3)
                .header(&a, &z)
                .to_string()
        });
        out.push(ProgramChange {
            path: c.path.clone(),
            what,
            note,
            diff,
        });
    }
    r.program_changes = out;
}

/// The step numbered `n`, added when missing.
fn step(steps: &mut BTreeMap<i64, Step>, n: i64) -> &mut Step {
    steps.entry(n).or_insert_with(|| Step {
        n,
        ..Step::default()
    })
}

/// What a `final_answer` or `submit_review` call among an answer's tool calls says.
fn final_call(calls: &serde_json::Value) -> Option<String> {
    calls.as_array()?.iter().find_map(|c| {
        let name = c["name"].as_str()?;
        if name != "final_answer" && name != "submit_review" {
            return None;
        }
        let args: serde_json::Value = match &c["arguments"] {
            serde_json::Value::String(s) => serde_json::from_str(s).ok()?,
            v => v.clone(),
        };
        let text = args["summary"].as_str().map(str::to_string);
        Some(format!(
            "{name}: {}",
            text.unwrap_or_else(|| args.to_string())
        ))
    })
}

/// The first `n` lines of `text`.
fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    let mut s = lines.iter().take(n).copied().collect::<Vec<_>>().join("\n");
    if lines.len() > n {
        s.push_str("\n…");
    }
    s
}

/// The change an agent's writing tool call applied, as a diff-like text (SEARCH lines
/// removed, REPLACE lines added), when it succeeded.
fn patch_of(t: &ToolCallRow) -> Option<Diff> {
    if t.is_error || !matches!(t.name.as_str(), "write_patch" | "write_file") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&t.arguments).ok()?;
    let path = v["path"].as_str()?.to_string();
    let text = if let Some(p) = v["patch"].as_str() {
        search_replace_as_diff(&path, p)
    } else {
        let content = v["content"].as_str()?;
        let mut s = format!("+++ b/{path}\n");
        for l in content.lines() {
            s.push_str(&format!("+{l}\n"));
        }
        s
    };
    Some(Diff { path, text })
}

fn search_replace_as_diff(path: &str, patch: &str) -> String {
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    let mut mode = ' ';
    for l in patch.lines() {
        if l.starts_with("<<<<<<<") {
            mode = '-';
            out.push_str("@@ SEARCH/REPLACE @@\n");
        } else if l.starts_with("=======") {
            mode = '+';
        } else if l.starts_with(">>>>>>>") {
            mode = ' ';
        } else if mode != ' ' {
            out.push_str(&format!("{mode}{l}\n"));
        }
    }
    out
}
