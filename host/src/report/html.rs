//! One run as a self-contained HTML page: inline CSS and SVG only, no script, and a
//! Content-Security-Policy of `default-src 'none'` so a browser fetches nothing at all. The
//! page is a `maud` template: every value spliced into it (diagnostics, answers, diffs, tool
//! output: anything a program, a plugin or the model wrote) is HTML-escaped (`& < > "`; every
//! attribute is double-quoted), and only the constant style sheet goes in unescaped.

use super::{RunReport, Step};
use crate::llm::pricing::format_usd;
use crate::store::{IterationRow, ToolCallRow};
use maud::{DOCTYPE, Markup, PreEscaped, html};

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header,main,footer{max-width:1080px;margin:0 auto;padding:0 24px}
header{padding-top:24px}
h1{font-size:22px;margin:0 0 8px}
h2{font-size:16px;margin:0 0 8px}
h3{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:#5b6475;margin:12px 0 4px}
.meta{display:flex;flex-wrap:wrap;gap:8px 24px;margin:0 0 16px;padding:0}
.meta div{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:6px 10px}
.meta dt{font-size:11px;color:#5b6475}.meta dd{margin:0;font-weight:600}
.status-success{color:#1a7f37}.status-failed,.status-blocked{color:#cf222e}
.chart{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;margin-bottom:16px}
ol.timeline{list-style:none;margin:0;padding:0;border-left:3px solid #c8cfdb;margin-left:8px}
li.step{position:relative;margin:0 0 16px 16px;background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px}
li.step::before{content:'';position:absolute;left:-25px;top:16px;width:12px;height:12px;border-radius:50%;background:#6b7a99}
li.step.ok::before{background:#1a7f37}li.step.bad::before{background:#cf222e}
pre{background:#0f1420;color:#d8dee9;padding:8px 10px;border-radius:6px;overflow-x:auto;font:12px/1.4 ui-monospace,monospace;margin:0}
pre .add{color:#7ee787}pre .del{color:#ff7b72}pre .hunk{color:#79c0ff}pre .head{color:#e3b341}
.summary{white-space:pre-wrap;background:#f0f4ff;border-radius:6px;padding:6px 10px;margin:0}
ul.diags{margin:0;padding-left:18px;font:12px/1.4 ui-monospace,monospace}
.sev-error{color:#cf222e}.sev-warning{color:#9a6700}
table.tools{border-collapse:collapse;width:100%;font-size:12px;table-layout:fixed}
table.tools th:nth-child(1){width:18px}table.tools th:nth-child(2){width:110px}
table.tools th:nth-child(3){width:34%}table.tools th:nth-child(5){width:48px}
table.tools pre{white-space:pre-wrap;word-break:break-all}
table.tools td,table.tools th{border-top:1px solid #e5e8ee;padding:4px 6px;text-align:left;vertical-align:top}
table.tools code{font:12px ui-monospace,monospace;word-break:break-all}
.okmark{color:#1a7f37;font-weight:700}.errmark{color:#cf222e;font-weight:700}
.tokens{color:#5b6475;font-size:12px;margin-top:8px}
footer{padding-bottom:32px}
.stop{background:#fff;border:2px solid #6b7a99;border-radius:8px;padding:12px 16px}
.stop.success{border-color:#1a7f37}.stop.failed,.stop.blocked{border-color:#cf222e}
.phase{margin:16px 0}.phase>h2{margin-left:8px}
.undone{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin-bottom:16px}
";

/// The whole page.
pub fn render(r: &RunReport) -> String {
    let row = &r.row;
    let title = format!("kiln run {} · {}", row.id, row.kind);
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy"
                    content="default-src 'none'; style-src 'unsafe-inline'; img-src data:";
                meta name="viewport" content="width=device-width";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                "\n"
                header {
                    h1 { (title) }
                    (meta_list(r))
                    @if let Some(at) = r.undone_ms {
                        p class="undone" id="undone" {
                            "Undone with " code { "kiln undo" } " at " (crate::clock::utc_text(at)) "."
                        }
                    }
                }
                "\n"
                main {
                    @if !r.steps.is_empty() {
                        section class="chart" {
                            h2 { "Tokens per " (r.step_word) }
                            (chart(r))
                        }
                    }
                    (timeline(r, "timeline"))
                    (programs(r))
                    @for p in &r.phases {
                        section class="phase" id={ "run-" (p.row.id) } {
                            h2 {
                                (p.row.kind.as_str()) " · run " (p.row.id) " · "
                                (p.row.stop_reason.as_deref().unwrap_or("not finished"))
                            }
                            @if !p.steps.is_empty() {
                                (chart(p))
                            }
                            (timeline(p, &format!("timeline-{}", p.row.id)))
                        }
                    }
                }
                "\n"
                (stop(r))
            }
        }
        "\n"
    };
    page.into_string()
}

/// The files programs the run started changed, beside the model's diffs.
fn programs(r: &RunReport) -> Markup {
    html! {
        @if !r.program_changes.is_empty() {
            section class="programs" id="program-changes" {
                h2 { "Changed by programs the run started" }
                @for c in &r.program_changes {
                    h3 class="program-change" {
                        (crate::terminal::path(&c.path)) ": " (c.what)
                        @if let Some(note) = &c.note {
                            " (" (note) ")"
                        }
                    }
                    @if let Some(d) = &c.diff {
                        (diff(d))
                    }
                }
            }
        }
    }
}

/// The steps of one run as an ordered list.
fn timeline(r: &RunReport, id: &str) -> Markup {
    html! {
        ol class="timeline" id=(id) data-steps=(r.steps.len()) {
            @for s in &r.steps {
                (step(r.step_word, s))
            }
        }
    }
}

/// The run's figures: status, model, steps, tokens, cost, start, targets.
fn meta_list(r: &RunReport) -> Markup {
    let row = &r.row;
    let (steps, word) = r.count();
    let item = |k: &str, id: &str, v: Markup| {
        html! {
            div { dt { (k) } dd id=(id) { (v) } }
        }
    };
    html! {
        dl class="meta" {
            (item("status", "status", html! {
                span class={ "status-" (row.status) } { (row.status) }
            }))
            (item("model", "model", html! { (row.model) }))
            (item(word, "step-count", html! { (steps) }))
            // Input counts every prompt token, cached or not, as the console and the chart do.
            (item("input tokens", "tokens-input", html! { (row.tokens.prompt()) }))
            (item("output tokens", "tokens-output", html! { (row.tokens.output) }))
            (item("cost", "cost", html! {
                @if let Some(c) = r.cost { (format_usd(c)) } @else { "unknown price" }
            }))
            (item("started", "started", html! { (crate::clock::utc_text(row.started_at)) }))
            @if !row.targets.is_empty() {
                (item("targets", "targets", html! { (row.targets.join(", ")) }))
            }
        }
    }
}

/// A bar chart of input (blue) and output (orange) tokens per step.
fn chart(r: &RunReport) -> Markup {
    let n = r.steps.len().max(1);
    let max = r
        .steps
        .iter()
        .map(|s| s.usage.prompt() + s.usage.output)
        .max()
        .unwrap_or(0)
        .max(1);
    let (w, ht, pad) = (1000.0, 140.0, 24.0);
    let slot = (w - pad) / n as f64;
    let bw = (slot * 0.35).min(40.0);
    let f1 = |v: f64| format!("{v:.1}");
    let bar = |v: u64| v as f64 / max as f64 * (ht - 10.0);
    html! {
        svg role="img" aria-label="tokens per step" viewBox={ "0 0 " (w) " " (ht + 22.0) }
            width="100%" height=(ht + 22.0) {
            @for (i, s) in r.steps.iter().enumerate() {
                @let x = pad + i as f64 * slot + slot / 2.0 - bw;
                @let (input, out) = (s.usage.prompt(), s.usage.output);
                @let (hi, ho) = (bar(input), bar(out));
                rect x=(f1(x)) y=(f1(ht - hi)) width=(f1(bw)) height=(f1(hi)) fill="#4a7bd0" {
                    title { (r.step_word) " " (s.n) ": " (input) " input tokens" }
                }
                rect x=(f1(x + bw)) y=(f1(ht - ho)) width=(f1(bw)) height=(f1(ho)) fill="#e8913a" {
                    title { (r.step_word) " " (s.n) ": " (out) " output tokens" }
                }
                text x=(f1(x + bw)) y=(ht + 16.0) font-size="11" text-anchor="middle" fill="#5b6475" {
                    (s.n)
                }
            }
            line x1=(pad) y1=(ht) x2=(w) y2=(ht) stroke="#c8cfdb" {}
            text x="0" y="12" font-size="11" fill="#5b6475" { (max) }
            rect x=(w - 130.0) y="2" width="10" height="10" fill="#4a7bd0" {}
            text x=(w - 116.0) y="11" font-size="11" { "input" }
            rect x=(w - 70.0) y="2" width="10" height="10" fill="#e8913a" {}
            text x=(w - 56.0) y="11" font-size="11" { "output" }
        }
    }
}

/// One iteration or turn: the runner's verdict, the model's summary, its failed requests,
/// the diffs, the tool calls, and its tokens.
fn step(word: &str, s: &Step) -> Markup {
    let class = match &s.runner {
        Some(it) if it.ok => "step ok",
        Some(_) => "step bad",
        None if s.tools.iter().any(|t| t.is_error) || !s.errors.is_empty() => "step bad",
        None => "step",
    };
    html! {
        li class=(class) id={ "step-" (s.n) } {
            h2 { (capitalize(word)) " " (s.n) }
            @if let Some(it) = &s.runner {
                (runner(it))
            }
            @if let Some(sum) = &s.summary {
                h3 { "Model" }
                p class="summary" { (sum) }
            }
            @for e in &s.errors {
                h3 { "Model request failed" }
                pre { (e) }
            }
            @for d in &s.diffs {
                h3 { "Diff: " (d.path) }
                (diff(&d.text))
            }
            @if !s.tools.is_empty() {
                (tools(&s.tools))
            }
            div class="tokens" {
                "tokens: input " span class="tin" { (s.usage.prompt()) }
                " (" (s.usage.cached_input) " cached), output "
                span class="tout" { (s.usage.output) }
                @if let Some(c) = s.cost {
                    ", cost " (format_usd(c))
                }
            }
        }
    }
}

/// The runner's verdict and its diagnostics (the first 50), or when it failed without any,
/// the last 20 lines of its output.
fn runner(it: &IterationRow) -> Markup {
    let diags = it.diagnostics.as_array().cloned().unwrap_or_default();
    let out = if it.stderr.is_empty() {
        &it.stdout
    } else {
        &it.stderr
    };
    let tail: Vec<&str> = out.lines().rev().take(20).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    html! {
        h3 { "Runner" }
        p {
            (if it.ok { "passed" } else { "failed" }) " (exit " (it.exit_code) "), "
            (it.runner_ms) " ms"
        }
        @if !diags.is_empty() {
            ul class="diags" {
                @for d in diags.iter().take(50) {
                    @let sev = d["severity"].as_str().unwrap_or("");
                    li class={ "sev-" (sev) } {
                        (d["file"].as_str().unwrap_or("")) ":"
                        (d["line"].as_i64().unwrap_or(0)) ":"
                        (d["column"].as_i64().unwrap_or(0)) ": "
                        (sev) ": " (d["message"].as_str().unwrap_or(""))
                    }
                }
            }
        } @else if !it.ok && !out.is_empty() {
            pre { (tail.join("\n")) }
        }
    }
}

/// A unified diff with added lines green, removed red, hunk headers blue.
fn diff(text: &str) -> Markup {
    html! {
        pre class="diff" {
            @for line in text.lines() {
                @let class = diff_class(line);
                @if class.is_empty() {
                    (line)
                } @else {
                    span class=(class) { (line) }
                }
                "\n"
            }
        }
    }
}

/// The class of one line of a unified diff (none for a context line).
fn diff_class(line: &str) -> &'static str {
    if line.starts_with("+++") || line.starts_with("---") {
        "head"
    } else if line.starts_with('+') {
        "add"
    } else if line.starts_with('-') {
        "del"
    } else if line.starts_with("@@") {
        "hunk"
    } else {
        ""
    }
}

/// The step's tool calls as a table: outcome, name, arguments and result (both cut), time.
fn tools(calls: &[ToolCallRow]) -> Markup {
    html! {
        h3 { "Tool calls" }
        table class="tools" {
            tr { th {} th { "tool" } th { "arguments" } th { "result" } th { "ms" } }
            @for t in calls {
                @let args: String = t.arguments.chars().take(300).collect();
                @let text = crate::engine::tools::result_text::as_text(&t.result);
                @let result: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
                @let result: String = result.chars().take(1200).collect();
                tr {
                    td {
                        @if crate::engine::tools::result_text::failed(t.is_error, &t.result) {
                            span class="errmark" title="failed" { "✗" }
                        } @else {
                            span class="okmark" title="ok" { "✓" }
                        }
                    }
                    td { (t.name) }
                    td { code { (args) } }
                    td { pre { (result) } }
                    td { (t.duration_ms) }
                }
            }
        }
    }
}

/// Why the run stopped, its summary and last error, and its token totals.
fn stop(r: &RunReport) -> Markup {
    let row = &r.row;
    let reason = row
        .stop_reason
        .as_deref()
        .unwrap_or("not finished (running, or killed)");
    html! {
        footer {
            section class={ "stop " (row.status) } id="stop" {
                h2 { "Stopped: " span id="stop-reason" { (reason) } }
                @if let Some(s) = &row.summary {
                    p class="summary" { (s) }
                }
                @if let Some(e) = &row.last_error {
                    pre { (e) }
                }
                p class="tokens" {
                    "total tokens: input " (row.tokens.prompt()) " (" (row.tokens.cached_input)
                    " cached), output " (row.tokens.output) "; generated by kiln "
                    (env!("CARGO_PKG_VERSION"))
                }
            }
        }
    }
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
