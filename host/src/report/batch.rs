//! A batch as one self-contained HTML page: a table of its tasks with their status,
//! attempts, cost and a link to each task's run report (a page beside it, as
//! `kiln report RUN --html` writes it). Independent of how batches are stored: the caller
//! maps its rows to [`BatchTask`].

use crate::llm::pricing::format_usd;
use maud::{DOCTYPE, PreEscaped, html};

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330}\
table{border-collapse:collapse}td,th{border-top:1px solid #dde1e8;padding:4px 10px;text-align:left}\
.success{color:#1a7f37}.failed,.blocked{color:#cf222e}";

/// One task of a batch, as the page shows it.
#[derive(Debug, Clone)]
pub struct BatchTask {
    /// The task's name or id.
    pub name: String,
    /// `queued`, `running`, `success`, `failed`, ...
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// What it cost, when known.
    pub cost: Option<f64>,
    /// The run of its last attempt and the file its report is in (relative to the page).
    pub report: Option<(i64, String)>,
}

/// The page for batch `id` with `tasks`; `budget` is the batch's cost cap, when set.
pub fn render(id: &str, tasks: &[BatchTask], budget: Option<f64>) -> String {
    let title = format!("kiln batch {id}");
    let total: f64 = tasks.iter().filter_map(|t| t.cost).sum();
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy"
                    content="default-src 'none'; style-src 'unsafe-inline'";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                p id="summary" {
                    span id="task-count" { (tasks.len()) } " tasks, cost "
                    span id="cost" { (format_usd(total)) }
                    @if let Some(b) = budget {
                        " of a " (format_usd(b)) " budget"
                    }
                }
                table id="tasks" {
                    tr { th { "task" } th { "status" } th { "attempts" } th { "cost" } th { "report" } }
                    @for t in tasks {
                        tr {
                            td { (t.name) }
                            td class=(t.status) { (t.status) }
                            td { (t.attempts) }
                            td {
                                @if let Some(c) = t.cost { (format_usd(c)) } @else { "-" }
                            }
                            td {
                                @if let Some((run, file)) = &t.report {
                                    a href=(file) { "run " (run) }
                                } @else {
                                    "-"
                                }
                            }
                        }
                    }
                }
            }
        }
        "\n"
    };
    page.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_listed_escaped_with_links() {
        let page = render(
            "b1",
            &[BatchTask {
                name: "<b>fix</b>".into(),
                status: "success".into(),
                attempts: 2,
                cost: Some(0.5),
                report: Some((7, "run-7.html".into())),
            }],
            Some(2.0),
        );
        assert!(page.contains("&lt;b&gt;fix&lt;/b&gt;"));
        assert!(page.contains("<a href=\"run-7.html\">run 7</a>"));
        assert!(page.contains("$0.5000</span> of a $2.00 budget"), "{page}");
    }
}
