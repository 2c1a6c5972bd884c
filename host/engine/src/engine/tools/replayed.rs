//! A resumed run's tool calls: those whose result the interrupted run stored are recorded
//! and shown again without running (`engine::resume` holds what is served); the rest run.

use super::caps::Changes;
use super::dispatch::{CallResult, Turn};
use super::handler::Kind;
use super::table::Toolbox;
use crate::engine::events::Event;
use crate::engine::run::Run;
use crate::llm::ToolCall;
use crate::store::StoreError;
use kiln_protocol::outcome::ToolOutcome;

/// Run a turn's calls ([`Toolbox::act`]), except those whose result is stored: those are
/// recorded and shown again (`tool.end`) without running.
pub(crate) async fn act(
    toolbox: &Toolbox<'_>,
    run: &mut Run<'_>,
    t: &Turn<'_>,
    calls: &[ToolCall],
    changed: &mut Changes,
) -> Result<Option<Vec<CallResult>>, StoreError> {
    let turn = t.turn;
    let stored = run.take_stored(calls);
    if stored.iter().all(Option::is_none) {
        return toolbox.act(run, t, calls, changed).await;
    }
    let missing: Vec<ToolCall> = calls
        .iter()
        .zip(&stored)
        .filter(|(_, s)| s.is_none())
        .map(|(c, _)| c.clone())
        .collect();
    let mut live = if missing.is_empty() {
        Vec::new().into_iter()
    } else {
        match toolbox.act(run, t, &missing, changed).await? {
            Some(v) => v.into_iter(),
            None => return Ok(None),
        }
    };
    let mut out = Vec::with_capacity(calls.len());
    for (c, st) in calls.iter().zip(stored) {
        let Some(st) = st else {
            out.extend(live.next());
            continue;
        };
        run.store.record_tool_call(
            run.id,
            turn as i64,
            &c.id,
            &c.name,
            &c.arguments,
            &st.result,
            st.is_error,
            st.ms as i64,
        )?;
        run.emit(Event::ToolEnd {
            turn,
            id: c.id.clone(),
            name: c.name.clone(),
            ok: !super::result_text::failed(st.is_error, &st.result),
            duration_ms: st.ms,
            preview: format!(
                "(replayed) {}",
                super::result_text::preview(&st.result)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        });
        if !st.is_error && toolbox.kind(&c.name) == Some(Kind::Write) {
            changed.writes += 1;
        }
        out.push(CallResult {
            outcome: if st.is_error {
                ToolOutcome::Failed(st.result)
            } else {
                ToolOutcome::Ok(st.result)
            },
            ms: st.ms,
        });
    }
    Ok(Some(out))
}
