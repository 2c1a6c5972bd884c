//! `kiln run-task` (hidden; how a worker runs each task): a [`TaskSpec`] read on stdin, checked
//! and run as `fix`, `agent` or `loop` with `--json` (the spec's mapping onto their options is
//! `task_cmd.rs`).

use super::args::{AgentArgs, LoopArgs};
use super::ctx::{Ctx, Outcome};
use super::task_cmd;
use crate::task_spec::{Allowed, Kind, TaskSpec};
use anyhow::Context;
use std::io::Read;
use std::path::PathBuf;

/// The most bytes of a spec on stdin.
const MAX_SPEC: usize = 2 * 1024 * 1024;

/// `kiln run-task`: the spec on stdin, checked, run with `--json`.
pub(crate) async fn run(ctx: &Ctx, plugins: &[PathBuf]) -> anyhow::Result<Outcome> {
    if !plugins.is_empty() {
        anyhow::bail!("run-task takes no --plugin: a task runs with the plugins installed here");
    }
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_SPEC as u64 + 1)
        .read_to_end(&mut buf)
        .context("cannot read the task spec on stdin")?;
    if buf.len() > MAX_SPEC {
        anyhow::bail!("the task spec on stdin is over {MAX_SPEC} bytes");
    }
    let v: serde_json::Value =
        serde_json::from_slice(&buf).context("the task spec on stdin is not JSON")?;
    let spec = TaskSpec::from_json(v).map_err(|e| anyhow::anyhow!("task spec: {e}"))?;
    spec.check_allowed(&Allowed::from_config(&ctx.config))
        .map_err(|e| anyhow::anyhow!("task spec: {e}"))?;
    match spec.kind {
        Kind::Fix => super::fix_cmd::run(ctx, &[], task_cmd::fix_args(&spec)).await,
        Kind::Agent => {
            let mut a: AgentArgs = task_cmd::defaults();
            task_cmd::apply_agent(&mut a, &spec);
            a.json = true;
            super::agent_cmd::run(ctx, &[], a).await
        }
        Kind::Loop => {
            let mut a: LoopArgs = task_cmd::defaults();
            task_cmd::apply_loop(&mut a, &spec, &ctx.workspace);
            a.json = true;
            super::loop_cmd::run(ctx, &[], a).await
        }
    }
}
