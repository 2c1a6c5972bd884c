//! The history tools as the agent offers them (`get_loops`, `get_loop_detail`): earlier loops
//! and agent runs of this project, answered from the store by `engine::history`.

use super::handler::{Ctx, Kind, ToolHandler, parse_args};
use super::settings::ToolSettings;
use crate::engine::history::{self, DetailArgs};
use crate::engine::tool_names::{GET_LOOP_DETAIL, GET_LOOPS};
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;

/// The `get_loops` handler: the project's last loops.
pub(crate) struct GetLoops;

/// The `get_loop_detail` handler: one loop's iterations and edits.
pub(crate) struct GetLoopDetail;

impl ToolHandler for GetLoops {
    fn name(&self) -> &'static str {
        GET_LOOPS
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        history::get_loops_def()
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
        history::get_loop_detail_def()
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
