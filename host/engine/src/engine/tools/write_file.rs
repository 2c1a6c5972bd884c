//! `write_file`: create a file of the workspace, or overwrite it whole, through the whole
//! edit format and the host's protected, atomic edit path. Offered only to loops that name it.

use super::edits::{edit_outcome, format};
use super::handler::{Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::schema_of;
use super::settings::ToolSettings;
use crate::edit::{self, ApplyOptions};
use crate::engine::defaults::WHOLE_FORMAT;
use crate::engine::tool_names::WRITE_FILE;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;

/// The `write_file` handler (listed in `registry.rs`).
pub(crate) struct WriteFile;

/// A `write_file` call's arguments (and, derived from them, the schema the model is shown).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

impl ToolHandler for WriteFile {
    fn name(&self) -> &'static str {
        WRITE_FILE
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            WRITE_FILE,
            "Create a file of the workspace, or overwrite it whole, with `content`. Written atomically; protected paths (kiln.toml, .kiln/, .git/) are refused.",
            schema_of::<Args>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Write
    }

    fn opt_in(&self) -> bool {
        true
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            let a: Args = match parse_args(WRITE_FILE, args) {
                Ok(a) => a,
                Err(o) => return o,
            };
            let s = cx.settings;
            let fmt = match format(cx.registry, WHOLE_FORMAT) {
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
            // A built-in format's first use compiles it: not the tool's time.
            let _ = fmt.link().await;
            let fut = edit::write_whole(fmt, cx.ws, &a.path, &a.content, &apply);
            let r = tokio::time::timeout(s.timeout, fut).await;
            edit_outcome(WRITE_FILE, r, s.timeout, cx.changed)
        })
    }
}
