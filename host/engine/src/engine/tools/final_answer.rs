//! `final_answer`: the agent's end. The agent reads the summary from the call before the
//! turn runs; the call itself only answers "done".

use super::handler::{Ctx, Kind, ToolHandler, def};
use super::schema::{schema_of, undescribed};
use super::settings::ToolSettings;
use crate::engine::tool_names::FINAL_ANSWER;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;

/// The `final_answer` handler (listed in `registry.rs`).
pub(crate) struct FinalAnswer;

/// A `final_answer` call's arguments, as the agent reads them (a missing summary reads as
/// empty; the schema the model is shown requires it).
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = undescribed,
    extend("required" = ["summary"])
)]
pub(crate) struct FinalAnswerArgs {
    /// What was done.
    #[serde(default)]
    pub summary: String,
}

impl ToolHandler for FinalAnswer {
    fn name(&self) -> &'static str {
        FINAL_ANSWER
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            FINAL_ANSWER,
            "Finish the task: give a summary of what was done.",
            schema_of::<FinalAnswerArgs>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Other
    }

    fn handle<'c, 'a>(&'c self, _: Ctx<'c, 'a>, _: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async { ToolOutcome::Ok("done".into()) })
    }
}
