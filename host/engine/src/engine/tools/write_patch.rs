//! `write_patch`: change a file of the workspace with an edit in a named edit format,
//! applied atomically through the host's edit path.

use super::edits::{edit_outcome, format};
use super::handler::{Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::{edit_format, schema_of};
use super::settings::ToolSettings;
use crate::edit::{self, ApplyOptions};
use crate::engine::tool_names::WRITE_PATCH;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;

/// The `write_patch` handler (listed in `registry.rs`).
pub(crate) struct WritePatch;

/// A `write_patch` call's arguments (and, derived from them, the schema the model is shown).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    path: String,
    patch: String,
    #[serde(default)]
    #[schemars(schema_with = "edit_format")]
    format: Option<String>,
}

impl ToolHandler for WritePatch {
    fn name(&self) -> &'static str {
        WRITE_PATCH
    }

    fn def(&self, s: &ToolSettings) -> ToolDef {
        def(
            WRITE_PATCH,
            &format!(
                "Change a file of the workspace: `patch` in the named edit format (default {}). Applied atomically; refused edits say exactly why.",
                s.default_format
            ),
            schema_of::<Args>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Write
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            let a: Args = match parse_args(WRITE_PATCH, args) {
                Ok(a) => a,
                Err(o) => return o,
            };
            let s = cx.settings;
            let fmt = match format(
                cx.registry,
                a.format.as_deref().unwrap_or(&s.default_format),
            ) {
                Ok(f) => f,
                Err(o) => return o,
            };
            let mut apply = ApplyOptions {
                protected: s.protected.clone(),
                ..Default::default()
            };
            // A file undo could not put back as the run found it (an existing git-ignored
            // one, or a new one git's rules at the run's start ignore) is refused.
            if !crate::undo::keeps(cx.run.undo(), cx.ws.root(), &a.path) {
                apply.protected.also(&a.path, crate::undo::NOT_KEPT.into());
            }
            let targets = [a.path];
            // A built-in format's first use compiles it: not the tool's time.
            let _ = fmt.link().await;
            let fut = edit::apply_response(fmt, cx.ws, &a.patch, &targets, &apply);
            let r = tokio::time::timeout(s.timeout, fut).await;
            edit_outcome(WRITE_PATCH, r, s.timeout, cx.changed)
        })
    }
}
