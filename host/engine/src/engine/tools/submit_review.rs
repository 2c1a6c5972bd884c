//! `submit_review`: the review phase's end (summary, blocker, pending items). The loop reads
//! the verdict from the call; the call itself only answers "done". Offered only to loops that
//! name it.

use super::handler::{Ctx, Kind, ToolHandler, def};
use super::schema::{schema_of, undescribed};
use super::settings::ToolSettings;
use crate::engine::tool_names::SUBMIT_REVIEW;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;

/// The `submit_review` handler (listed in `registry.rs`).
pub(crate) struct SubmitReview;

/// A `submit_review` call's arguments, as the execute/review loop reads them (missing or
/// mistyped fields read as empty; the schema the model is shown requires each, typed).
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = undescribed,
    extend("required" = ["summary", "blocker", "pending"])
)]
pub struct SubmitReviewArgs {
    /// What actually happened.
    #[serde(default, deserialize_with = "lenient_string")]
    #[schemars(with = "String")]
    pub summary: String,
    /// Something only a person can resolve; empty when none.
    #[serde(default, deserialize_with = "lenient_string")]
    #[schemars(with = "String")]
    pub blocker: String,
    /// Items still to do (non-strings and blank items are dropped).
    #[serde(default, deserialize_with = "lenient_items")]
    #[schemars(with = "Vec<String>")]
    pub pending: Vec<String>,
}

fn lenient_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(v.as_str().unwrap_or("").to_string())
}

fn lenient_items<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str())
        .filter(|p| !p.trim().is_empty())
        .map(String::from)
        .collect())
}

impl ToolHandler for SubmitReview {
    fn name(&self) -> &'static str {
        SUBMIT_REVIEW
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            SUBMIT_REVIEW,
            "Finish the review: a summary of the state of the work, a blocker (empty when none: something only a person can resolve) and the items still pending (empty when the task is done).",
            schema_of::<SubmitReviewArgs>(),
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
