//! The set of plugins a command can use: the built-ins embedded in the binary plus the user
//! plugins named in configuration (`[plugins.NAME] path = "x.wasm"`), each loaded once.

use super::{Plugin, PluginError, PluginKind, Runtime, Source, builtin};
use crate::config::Config;
use std::path::Path;

/// Loaded plugins by name.
pub struct Registry {
    plugins: Vec<Plugin>,
}

impl Registry {
    /// Load the built-ins and every configured user plugin. A user plugin with a built-in's
    /// name replaces the built-in.
    pub async fn load(
        runtime: &Runtime,
        workspace: &Path,
        config: &Config,
    ) -> Result<Registry, PluginError> {
        let mut plugins: Vec<Plugin> = Vec::new();
        for (_, bytes) in builtin::BUILTINS {
            plugins.push(
                runtime
                    .load(bytes, Source::Builtin, workspace, config)
                    .await?,
            );
        }
        for pc in config.plugins.values() {
            let Some(path) = &pc.path else { continue };
            let checked = runtime.check_file(path)?;
            let plugin = runtime.instantiate(checked, workspace, config).await?;
            plugins.retain(|p| p.name != plugin.name);
            plugins.push(plugin);
        }
        plugins.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Registry { plugins })
    }

    /// Add a plugin loaded elsewhere (for example `--plugin FILE`).
    pub fn insert(&mut self, plugin: Plugin) {
        self.plugins.retain(|p| p.name != plugin.name);
        self.plugins.push(plugin);
    }

    /// Every plugin, sorted by name.
    pub fn all(&self) -> &[Plugin] {
        &self.plugins
    }

    /// A plugin by name, of the given kind if one is given.
    pub fn get(&self, name: &str, kind: Option<PluginKind>) -> Result<&Plugin, PluginError> {
        // Names the built-ins were known by before.
        let name = match name {
            "whole-file" => "whole",
            other => other,
        };
        match self.plugins.iter().find(|p| p.name == name) {
            Some(p) => match kind {
                Some(k) if p.kind != k => Err(PluginError::WrongKind {
                    plugin: name.into(),
                    actual: p.kind,
                    expected: k,
                }),
                _ => Ok(p),
            },
            None => Err(PluginError::NotFound {
                kind: kind.map_or("plugin".to_string(), |k| format!("{k} plugin")),
                name: name.into(),
                known: self
                    .plugins
                    .iter()
                    .filter(|p| kind.is_none_or(|k| p.kind == k))
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}
