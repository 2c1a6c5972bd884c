//! `apply_edit`: an edit response in any edit format, applied through the host's atomic,
//! protected edit path (every file or none), or only validated (`dry_run`). It needs no run,
//! so `kiln mcp` serves it; a loop offers it only when it names it.

use super::handler::{Bare, Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::schema_of;
use super::settings::ToolSettings;
use crate::edit::{self, ApplyOptions};
use crate::engine::tool_names::APPLY_EDIT;
use crate::llm::ToolDef;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;

/// The `apply_edit` handler (listed in `registry.rs`).
pub(crate) struct ApplyEdit;

/// An `apply_edit` call's arguments (and, derived from them, the schema the caller is shown).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    /// The edit text; missing is refused with a message that says what it is.
    #[schemars(
        required,
        description = "The edit, e.g. SEARCH/REPLACE blocks with <<< path=REL >>> headers"
    )]
    response: Option<String>,
    /// The edit format; none: the default format.
    #[schemars(description = "Edit format (default: the server's)")]
    format: Option<String>,
    /// The files the edit may change.
    #[serde(default)]
    #[schemars(description = "The files the edit may change (workspace-relative)")]
    files: Option<Vec<String>>,
    /// Validate only.
    #[serde(default)]
    #[schemars(description = "Validate and report without writing")]
    dry_run: Option<bool>,
}

impl ToolHandler for ApplyEdit {
    fn name(&self) -> &'static str {
        APPLY_EDIT
    }

    fn def(&self, s: &ToolSettings) -> ToolDef {
        def(
            APPLY_EDIT,
            &format!(
                "Apply an edit response to the workspace through kiln's atomic edit path: every file or none, protected paths (kiln.toml, .kiln/, .git/, [sandbox] protect) refused. `response` is the edit text in `format` (default {}; search-replace, udiff, whole, apply-patch or a plugin format); `files` names the files it may change (workspace-relative; with several, each file's blocks follow a `<<< path=REL >>>` header); `dry_run` validates without writing. Returns the per-edit report; a refused edit is an error that says why.",
                s.default_format
            ),
            schema_of::<Args>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Write
    }

    fn opt_in(&self) -> bool {
        true
    }

    fn bare(&self) -> bool {
        true
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        let Ctx {
            registry,
            settings,
            ws,
            changed,
            ..
        } = cx;
        let fix_host = None;
        Box::pin(async move {
            let (outcome, written) = apply(
                Bare {
                    registry,
                    settings,
                    ws,
                    fix_host,
                },
                args,
            )
            .await;
            changed.note(written);
            outcome
        })
    }

    fn handle_bare<'c>(
        &'c self,
        cx: Bare<'c>,
        args: &'c str,
    ) -> Option<BoxFuture<'c, (ToolOutcome, Vec<String>)>> {
        Some(Box::pin(apply(cx, args)))
    }
}

/// Apply (or validate) the edit: its report, and the files written.
async fn apply(cx: Bare<'_>, args: &str) -> (ToolOutcome, Vec<String>) {
    let a: Args = match parse_args(APPLY_EDIT, args) {
        Ok(a) => a,
        Err(o) => return (o, Vec::new()),
    };
    let Some(response) = a.response else {
        return (
            ToolOutcome::Failed("`response` (the edit text) is required".into()),
            Vec::new(),
        );
    };
    let s = cx.settings;
    let format_name = a.format.as_deref().unwrap_or(&s.default_format);
    let format = match cx
        .registry
        .get(format_name, Some(crate::plugin::PluginKind::EditFormat))
    {
        Ok(f) => f,
        Err(e) => return (ToolOutcome::Failed(e.to_string()), Vec::new()),
    };
    let opts = ApplyOptions {
        dry_run: a.dry_run.unwrap_or(false),
        protected: s.protected.clone(),
        ..Default::default()
    };
    let files = a.files.unwrap_or_default();
    let (text, is_error, written) = edit::apply_as_tool_result(
        APPLY_EDIT, format, cx.ws, &response, &files, &opts, s.timeout,
    )
    .await;
    (ToolOutcome::from_flag(text, is_error), written)
}
