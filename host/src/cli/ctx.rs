//! What every command gets ([`Ctx`]: the workspace, merged configuration, the plugin runtime,
//! the store) and what it ends with ([`Outcome`], mapped to the exit status).

use crate::config::Config;
use crate::plugin::{Registry, Runtime};
use std::path::PathBuf;

/// Outcome of a command, mapped to the exit status.
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: the work ran but did not succeed.
    Failure,
    /// Exit 2: the work stopped on an error (transport, plugin).
    Error,
    /// Exit 130: the work was interrupted (Ctrl-C), as a shell reports SIGINT.
    Interrupted,
}

/// Everything a command needs: the workspace, merged configuration, the runtime and the
/// loaded plugins.
pub(crate) struct Ctx {
    pub workspace: PathBuf,
    pub config: Config,
    /// One plugin runtime (wasmtime engine) per process, shared by every plugin it loads.
    pub runtime: std::sync::Arc<Runtime>,
    /// `-q`: no progress lines, only results and errors.
    pub quiet: bool,
    /// `--store`, `KILN_STORE` or the user's `[store] url`; `None`: the workspace's own file.
    pub store: Option<crate::store::StoreUrl>,
    /// The current directory relative to the workspace root when the root was found above
    /// it (no `-C`); empty otherwise. Workspace paths on the command line are relative to it.
    pub cwd_in_workspace: PathBuf,
    /// The marker the root was found by (`.git`, `kiln.toml`, `.kiln`) when it is not the
    /// current directory, for the banner.
    pub found_by: Option<&'static str>,
    /// Undo's recording for the runs this command starts (on for fix, agent, loop and a batch
    /// task; off otherwise).
    pub undo: crate::undo::Recording,
}

impl Ctx {
    /// Workspace-relative paths for paths given on the command line (relative to the current
    /// directory, or to `-C DIR` when given).
    pub fn workspace_paths(&self, given: Vec<String>) -> Vec<String> {
        given
            .iter()
            .map(|p| super::root::from_cwd(&self.cwd_in_workspace, p))
            .collect()
    }

    /// The line that says which root was found above the current directory, if one was.
    pub fn root_banner(&self) -> Option<String> {
        self.found_by.map(|m| {
            format!(
                "workspace: {} (the nearest directory holding {m})",
                crate::terminal::printable(&self.workspace.to_string_lossy())
            )
        })
    }

    /// The same workspace and runtime with another configuration (grants a command adds).
    pub fn with_config(&self, config: Config) -> Ctx {
        Ctx {
            workspace: self.workspace.clone(),
            config,
            runtime: self.runtime.clone(),
            quiet: self.quiet,
            store: self.store.clone(),
            cwd_in_workspace: self.cwd_in_workspace.clone(),
            found_by: self.found_by,
            undo: self.undo.fresh(),
        }
    }

    /// The store runs of this workspace are recorded in (see [`Ctx::store`]).
    pub fn open_store(&self) -> Result<crate::store::Store, crate::store::StoreError> {
        crate::store::Store::open_url(self.store.as_ref(), &self.workspace)
    }

    /// Built-ins, configured plugins and `--plugin` files.
    pub async fn registry(&self, extra: &[PathBuf]) -> anyhow::Result<Registry> {
        self.registry_for(extra, crate::plugin::Needed::All).await
    }

    /// Like [`Ctx::registry`], compiling only the plugins named in `needed` (and `--plugin`
    /// files).
    pub async fn registry_for(
        &self,
        extra: &[PathBuf],
        needed: crate::plugin::Needed<'_>,
    ) -> anyhow::Result<Registry> {
        let mut reg =
            Registry::load_needed(&self.runtime, &self.workspace, &self.config, needed).await?;
        // Built-ins the cache lacks are compiled in the background for the next call.
        super::warmer::spawn_if_cold(&self.runtime);
        for w in reg.warnings() {
            eprintln!("warning: {}", crate::terminal::printable(&w));
        }
        for path in extra {
            let checked = self.runtime.check_file(path)?;
            reg.insert(
                self.runtime
                    .instantiate(checked, &self.workspace, &self.config)
                    .await?,
                &self.config,
            )?;
        }
        if !self.quiet {
            for w in reg.unknown_sections(&self.config) {
                eprintln!("warning: {}", crate::terminal::printable(&w));
            }
        }
        Ok(reg)
    }
}
