//! `kiln trust`: record the workspace's kiln.toml, as it is now, as trusted (the copy is kept
//! in the user's state directory, `$XDG_STATE_HOME/kiln/trust/`, keyed by the workspace's
//! canonical path, outside every workspace), or report whether it is and what it would apply.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::config::Trust;
use clap::Args;
use serde_json::json;

#[derive(Debug, Args)]
pub(crate) struct TrustArgs {
    /// Only report whether kiln.toml is trusted (exit 0) or not (exit 1); change nothing.
    #[arg(long)]
    check: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(ctx: &Ctx, args: TrustArgs) -> anyhow::Result<Outcome> {
    let file = ctx.workspace.join("kiln.toml");
    if args.check && !file.is_file() {
        // Nothing to trust: nothing a workspace file could widen, so the check passes.
        if args.json {
            print_json(
                &json!({ "file": file, "trust": "not-needed", "exists": false, "ignored": [] }),
            );
        } else {
            println!("{}: not-needed (there is none)", file.display());
        }
        return Ok(Outcome::Success);
    }
    anyhow::ensure!(
        file.is_file(),
        "there is no kiln.toml in {} to trust",
        ctx.workspace.display()
    );
    if args.check {
        let (state, ok) = match &ctx.config.trust {
            Trust::NotNeeded => ("not-needed", true),
            Trust::Trusted => ("trusted", true),
            Trust::Assumed => ("assumed", true),
            Trust::Untrusted { .. } => ("untrusted", false),
        };
        if args.json {
            let (ignored, changed) = match &ctx.config.trust {
                Trust::Untrusted {
                    ignored, changed, ..
                } => (ignored.clone(), changed.clone()),
                _ => (Vec::new(), Vec::new()),
            };
            print_json(
                &json!({ "file": file, "trust": state, "ignored": ignored, "changed": changed }),
            );
        } else if let Some(w) = ctx.config.trust.warning() {
            eprintln!("{w}");
        } else {
            println!("{}: {state}", file.display());
        }
        return Ok(if ok {
            Outcome::Success
        } else {
            Outcome::Failure
        });
    }
    let (record, pinned) = crate::config::trust_workspace(&ctx.workspace)?;
    if args.json {
        print_json(
            &json!({ "file": file, "trust": "trusted", "record": record, "pinned": pinned }),
        );
    } else if pinned.is_empty() {
        eprintln!(
            "trusted {} as it is now; a later change needs `kiln trust` again",
            file.display()
        );
    } else {
        eprintln!(
            "trusted {} as it is now, with the workspace files it runs or loads ({}); a later change to any of them needs `kiln trust` again",
            file.display(),
            pinned
                .iter()
                .map(|p| crate::terminal::printable(p))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(Outcome::Success)
}
