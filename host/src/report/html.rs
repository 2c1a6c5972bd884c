//! One run as a self-contained HTML page: inline CSS and SVG only, no script, and a
//! Content-Security-Policy of `default-src 'none'` so a browser fetches nothing at all. Every
//! text that comes from the store (diagnostics, answers, diffs, tool output: anything a
//! program, a plugin or the model wrote) is HTML-escaped.

use super::{RunReport, Step};
use crate::llm::pricing::format_usd;
use std::fmt::Write;

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

/// `text` with `& < > " '` escaped, safe in element content and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
pub fn render(r: &RunReport) -> String {
    let row = &r.row;
    let mut h = String::new();
    let title = format!("kiln run {} · {}", row.id, row.kind);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<header><h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    meta(&mut h, r);
    if let Some(at) = r.undone_ms {
        let _ = write!(
            h,
            "<p class=\"undone\" id=\"undone\">Undone with <code>kiln undo</code> at {}.</p>",
            escape(&crate::clock::utc_text(at))
        );
    }
    h.push_str("</header>\n<main>");
    if !r.steps.is_empty() {
        h.push_str("<section class=\"chart\"><h2>Tokens per ");
        h.push_str(r.step_word);
        h.push_str("</h2>");
        chart(&mut h, r);
        h.push_str("</section>");
    }
    timeline(&mut h, r, "timeline");
    programs(&mut h, r);
    for p in &r.phases {
        let _ = write!(
            h,
            "<section class=\"phase\" id=\"run-{}\"><h2>{} · run {} · {}</h2>",
            p.row.id,
            escape(p.row.kind.as_str()),
            p.row.id,
            escape(p.row.stop_reason.as_deref().unwrap_or("not finished"))
        );
        if !p.steps.is_empty() {
            chart(&mut h, p);
        }
        timeline(&mut h, p, &format!("timeline-{}", p.row.id));
        h.push_str("</section>");
    }
    h.push_str("</main>\n");
    stop(&mut h, r);
    h.push_str("</body></html>\n");
    h
}

/// The files programs the run started changed, beside the model's diffs.
fn programs(h: &mut String, r: &RunReport) {
    if r.program_changes.is_empty() {
        return;
    }
    h.push_str("<section class=\"programs\" id=\"program-changes\"><h2>Changed by programs the run started</h2>");
    for c in &r.program_changes {
        let note = c
            .note
            .as_deref()
            .map(|n| format!(" ({})", escape(n)))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<h3 class=\"program-change\">{}: {}{note}</h3>",
            escape(&crate::terminal::path(&c.path)),
            c.what
        );
        if let Some(d) = &c.diff {
            diff(h, d);
        }
    }
    h.push_str("</section>");
}

/// The steps of one run as an ordered list.
fn timeline(h: &mut String, r: &RunReport, id: &str) {
    let _ = write!(
        h,
        "<ol class=\"timeline\" id=\"{id}\" data-steps=\"{}\">",
        r.steps.len()
    );
    for s in &r.steps {
        step(h, r.step_word, s);
    }
    h.push_str("</ol>");
}

fn meta(h: &mut String, r: &RunReport) {
    let row = &r.row;
    let status = escape(&row.status);
    h.push_str("<dl class=\"meta\">");
    let mut item = |k: &str, v: String, id: &str| {
        let _ = write!(h, "<div><dt>{k}</dt><dd id=\"{id}\">{v}</dd></div>");
    };
    item(
        "status",
        format!("<span class=\"status-{status}\">{status}</span>"),
        "status",
    );
    item("model", escape(&row.model), "model");
    let (steps, word) = r.count();
    item(word, steps.to_string(), "step-count");
    // Input counts every prompt token, cached or not, as the console and the chart do.
    item(
        "input tokens",
        row.tokens.prompt().to_string(),
        "tokens-input",
    );
    item(
        "output tokens",
        row.tokens.output.to_string(),
        "tokens-output",
    );
    item(
        "cost",
        r.cost
            .map(format_usd)
            .unwrap_or_else(|| "unknown price".into()),
        "cost",
    );
    item(
        "started",
        escape(&crate::clock::utc_text(row.started_at)),
        "started",
    );
    if !row.targets.is_empty() {
        item("targets", escape(&row.targets.join(", ")), "targets");
    }
    h.push_str("</dl>");
}

/// A bar chart of input (blue) and output (orange) tokens per step.
fn chart(h: &mut String, r: &RunReport) {
    let n = r.steps.len().max(1);
    let max = r
        .steps
        .iter()
        .map(|s| s.usage.prompt() + s.usage.output)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (w, ht, pad) = (1000.0, 140.0, 24.0);
    let slot = (w - pad) / n as f64;
    let bw = (slot * 0.35).min(40.0);
    let _ = write!(
        h,
        "<svg role=\"img\" aria-label=\"tokens per step\" viewBox=\"0 0 {w} {}\" width=\"100%\" height=\"{}\">",
        ht + 22.0,
        ht + 22.0
    );
    for (i, s) in r.steps.iter().enumerate() {
        let x = pad + i as f64 * slot + slot / 2.0 - bw;
        let input = s.usage.prompt() as f64;
        let out = s.usage.output as f64;
        let hi = input / max * (ht - 10.0);
        let ho = out / max * (ht - 10.0);
        let _ = write!(
            h,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bw:.1}\" height=\"{hi:.1}\" fill=\"#4a7bd0\"><title>{} {}: {} input tokens</title></rect>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bw:.1}\" height=\"{ho:.1}\" fill=\"#e8913a\"><title>{} {}: {} output tokens</title></rect>\
             <text x=\"{:.1}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5b6475\">{}</text>",
            ht - hi,
            r.step_word,
            s.n,
            input,
            x + bw,
            ht - ho,
            r.step_word,
            s.n,
            out,
            x + bw,
            ht + 16.0,
            s.n
        );
    }
    let _ = write!(
        h,
        "<line x1=\"{pad}\" y1=\"{ht}\" x2=\"{w}\" y2=\"{ht}\" stroke=\"#c8cfdb\"/>\
         <text x=\"0\" y=\"12\" font-size=\"11\" fill=\"#5b6475\">{}</text>\
         <rect x=\"{}\" y=\"2\" width=\"10\" height=\"10\" fill=\"#4a7bd0\"/><text x=\"{}\" y=\"11\" font-size=\"11\">input</text>\
         <rect x=\"{}\" y=\"2\" width=\"10\" height=\"10\" fill=\"#e8913a\"/><text x=\"{}\" y=\"11\" font-size=\"11\">output</text></svg>",
        max as u64,
        w - 130.0,
        w - 116.0,
        w - 70.0,
        w - 56.0
    );
}

fn step(h: &mut String, word: &str, s: &Step) {
    let class = match &s.runner {
        Some(it) if it.ok => "step ok",
        Some(_) => "step bad",
        None if s.tools.iter().any(|t| t.is_error) || !s.errors.is_empty() => "step bad",
        None => "step",
    };
    let _ = write!(
        h,
        "<li class=\"{class}\" id=\"step-{}\"><h2>{} {}</h2>",
        s.n,
        capitalize(word),
        s.n
    );
    if let Some(it) = &s.runner {
        runner(h, it);
    }
    if let Some(sum) = &s.summary {
        let _ = write!(h, "<h3>Model</h3><p class=\"summary\">{}</p>", escape(sum));
    }
    for e in &s.errors {
        let _ = write!(h, "<h3>Model request failed</h3><pre>{}</pre>", escape(e));
    }
    for d in &s.diffs {
        let _ = write!(h, "<h3>Diff: {}</h3>", escape(&d.path));
        diff(h, &d.text);
    }
    if !s.tools.is_empty() {
        tools(h, &s.tools);
    }
    let _ = write!(
        h,
        "<div class=\"tokens\">tokens: input <span class=\"tin\">{}</span> ({} cached), output <span class=\"tout\">{}</span>{}</div></li>",
        s.usage.prompt(),
        s.usage.cached_input,
        s.usage.output,
        s.cost
            .map(|c| format!(", cost {}", format_usd(c)))
            .unwrap_or_default()
    );
}

fn runner(h: &mut String, it: &crate::store::IterationRow) {
    let _ = write!(
        h,
        "<h3>Runner</h3><p>{} (exit {}), {} ms</p>",
        if it.ok { "passed" } else { "failed" },
        it.exit_code,
        it.runner_ms
    );
    let diags = it.diagnostics.as_array().cloned().unwrap_or_default();
    if !diags.is_empty() {
        h.push_str("<ul class=\"diags\">");
        for d in diags.iter().take(50) {
            let sev = d["severity"].as_str().unwrap_or("");
            let _ = write!(
                h,
                "<li class=\"sev-{}\">{}:{}:{}: {}: {}</li>",
                escape(sev),
                escape(d["file"].as_str().unwrap_or("")),
                d["line"].as_i64().unwrap_or(0),
                d["column"].as_i64().unwrap_or(0),
                escape(sev),
                escape(d["message"].as_str().unwrap_or(""))
            );
        }
        h.push_str("</ul>");
    } else if !it.ok && (!it.stderr.is_empty() || !it.stdout.is_empty()) {
        let out = if it.stderr.is_empty() {
            &it.stdout
        } else {
            &it.stderr
        };
        let tail: Vec<&str> = out.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let _ = write!(h, "<pre>{}</pre>", escape(&tail.join("\n")));
    }
}

/// A unified diff with added lines green, removed red, hunk headers blue.
fn diff(h: &mut String, text: &str) {
    h.push_str("<pre class=\"diff\">");
    for line in text.lines() {
        let class = if line.starts_with("+++") || line.starts_with("---") {
            "head"
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else {
            ""
        };
        if class.is_empty() {
            h.push_str(&escape(line));
        } else {
            let _ = write!(h, "<span class=\"{class}\">{}</span>", escape(line));
        }
        h.push('\n');
    }
    h.push_str("</pre>");
}

fn tools(h: &mut String, calls: &[crate::store::ToolCallRow]) {
    h.push_str("<h3>Tool calls</h3><table class=\"tools\"><tr><th></th><th>tool</th><th>arguments</th><th>result</th><th>ms</th></tr>");
    for t in calls {
        let args: String = t.arguments.chars().take(300).collect();
        let text = crate::engine::tools::result_text::as_text(&t.result);
        let result: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
        let result: String = result.chars().take(1200).collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td><pre>{}</pre></td><td>{}</td></tr>",
            if crate::engine::tools::result_text::failed(t.is_error, &t.result) {
                "<span class=\"errmark\" title=\"failed\">✗</span>"
            } else {
                "<span class=\"okmark\" title=\"ok\">✓</span>"
            },
            escape(&t.name),
            escape(&args),
            escape(&result),
            t.duration_ms
        );
    }
    h.push_str("</table>");
}

fn stop(h: &mut String, r: &RunReport) {
    let row = &r.row;
    let reason = row
        .stop_reason
        .as_deref()
        .unwrap_or("not finished (running, or killed)");
    let _ = write!(
        h,
        "<footer><section class=\"stop {}\" id=\"stop\"><h2>Stopped: <span id=\"stop-reason\">{}</span></h2>",
        escape(&row.status),
        escape(reason)
    );
    if let Some(s) = &row.summary {
        let _ = write!(h, "<p class=\"summary\">{}</p>", escape(s));
    }
    if let Some(e) = &row.last_error {
        let _ = write!(h, "<pre>{}</pre>", escape(e));
    }
    let _ = write!(
        h,
        "<p class=\"tokens\">total tokens: input {} ({} cached), output {}; generated by kiln {}</p></section></footer>",
        row.tokens.prompt(),
        row.tokens.cached_input,
        row.tokens.output,
        env!("CARGO_PKG_VERSION")
    );
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }
}
