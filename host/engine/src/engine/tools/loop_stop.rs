//! `loop_stop`: the fix loop's end when the failure cannot be fixed by editing (the model
//! gives the reason). The fix loop reads the reason from the call before anything of the
//! round runs; the call itself only answers "done". Offered only to loops that name it.

use super::handler::{Ctx, Kind, ToolHandler, def};
use super::schema::schema_of;
use super::settings::ToolSettings;
use crate::engine::tool_names::LOOP_STOP;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;

/// The `loop_stop` handler (listed in `registry.rs`).
pub(crate) struct LoopStop;

/// A `loop_stop` call's arguments (and, derived from them, the schema the model is shown).
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct LoopStopArgs {
    /// Why the loop cannot finish by editing; a missing one reads as "no reason given".
    #[schemars(required, description = "")]
    pub reason: Option<String>,
}

impl LoopStopArgs {
    /// The reason a call gives ("no reason given" for none, or arguments that do not parse).
    pub(crate) fn reason_of(args: &str) -> String {
        serde_json::from_str::<LoopStopArgs>(args)
            .ok()
            .and_then(|a| a.reason)
            .unwrap_or_else(|| "no reason given".into())
    }
}

impl ToolHandler for LoopStop {
    fn name(&self) -> &'static str {
        LOOP_STOP
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            LOOP_STOP,
            "Stop the fix loop when the task cannot be completed by editing the given files (missing information, the failure is elsewhere). Give the reason.",
            schema_of::<LoopStopArgs>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Other
    }

    fn opt_in(&self) -> bool {
        true
    }

    fn handle<'c, 'a>(&'c self, _: Ctx<'c, 'a>, _: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async { ToolOutcome::Ok("done".into()) })
    }
}
