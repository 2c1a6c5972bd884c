//! The history tools (`get_loops`, `get_loop_detail`), as the agent and the fix loop offer
//! them: earlier loops and agent runs of this project, answered from the store by
//! `engine::history`.

use super::handler::{Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::{schema_of, undescribed};
use super::settings::ToolSettings;
use crate::engine::history;
use crate::engine::tool_names::{GET_LOOP_DETAIL, GET_LOOPS};
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;

/// `get_loops` takes no arguments (any it is given are ignored).
#[derive(schemars::JsonSchema)]
#[schemars(extend("properties" = {}))]
struct NoArgs {}

/// A `get_loop_detail` call's arguments (and, derived from them, the schema the model is shown).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[schemars(transform = undescribed)]
struct DetailArgs {
    /// The loop's id in the store.
    id: i64,
}

/// The `get_loops` handler: the project's last loops.
pub(crate) struct GetLoops;

/// The `get_loop_detail` handler: one loop's iterations and edits.
pub(crate) struct GetLoopDetail;

impl ToolHandler for GetLoops {
    fn name(&self) -> &'static str {
        GET_LOOPS
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            GET_LOOPS,
            "List earlier fix loops and agent runs on this project (id, kind, status, stop reason, summary).",
            schema_of::<NoArgs>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Read
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, _: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move { history::loops(cx.run.store, cx.run.id) })
    }
}

impl ToolHandler for GetLoopDetail {
    fn name(&self) -> &'static str {
        GET_LOOP_DETAIL
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            GET_LOOP_DETAIL,
            "Show one earlier loop: its iterations, errors and edits.",
            schema_of::<DetailArgs>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Read
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            match parse_args::<DetailArgs>(GET_LOOP_DETAIL, args) {
                Ok(a) => history::loop_detail(cx.run.store, a.id),
                Err(_) => ToolOutcome::Failed("`id` (integer) is required".into()),
            }
        })
    }
}
