//! The set of plugins a command can use: the built-ins embedded in the binary plus the user
//! plugins named in configuration (`[plugins.NAME] path = "x.wasm"`), each loaded once.
//! A user plugin may take a built-in's name only when its section says `replaces = "NAME"`;
//! a user plugin that cannot be loaded is reported and skipped, so only the commands that
//! use it fail (with its error).

use super::{Plugin, PluginError, PluginKind, Runtime, Source, builtin};
use kiln_config::Config;
use std::path::Path;

/// Loaded plugins by name.
pub struct Registry {
    plugins: Vec<Plugin>,
    /// Names of the built-ins.
    builtins: Vec<String>,
    /// User plugins that could not be loaded: the name a command would use, and why.
    broken: Vec<(String, String)>,
}

/// Which plugins a command needs: all of them, or only some by name (a check needs its
/// runner, an edit its format): only those are compiled, so a cold start pays for what runs.
#[derive(Debug, Clone, Copy)]
pub enum Needed<'a> {
    /// Every built-in and configured plugin (lists, the agent).
    All,
    /// These names only.
    Only(&'a [&'a str]),
}

impl Needed<'_> {
    fn wants(&self, name: &str) -> bool {
        match self {
            Needed::All => true,
            Needed::Only(names) => names.iter().any(|n| canonical(n) == name),
        }
    }
}

/// Names the built-ins were known by before.
fn canonical(name: &str) -> &str {
    match name {
        "whole-file" => "whole",
        other => other,
    }
}

impl Registry {
    /// Load the built-ins and every configured user plugin. A configured plugin that cannot
    /// be loaded (missing file, invalid component, a built-in's name without `replaces`) is
    /// skipped; see [`Registry::warnings`]. A built-in that cannot be loaded is an error.
    pub async fn load(
        runtime: &Runtime,
        workspace: &Path,
        config: &Config,
    ) -> Result<Registry, PluginError> {
        Registry::load_needed(runtime, workspace, config, Needed::All).await
    }

    /// [`Registry::load`] restricted to what a command needs. The built-ins needed are
    /// compiled (or loaded from the cache) in parallel, one thread each.
    pub async fn load_needed(
        runtime: &Runtime,
        workspace: &Path,
        config: &Config,
        needed: Needed<'_>,
    ) -> Result<Registry, PluginError> {
        // A built-in with declared data is known without compiling it (compiled on its first
        // call); one without is compiled now, as before, in parallel.
        let mut plugins: Vec<Plugin> = Vec::new();
        let mut undeclared: Vec<&[u8]> = Vec::new();
        for (stem, bytes) in builtin::BUILTINS
            .iter()
            .filter(|(stem, _)| needed.wants(&builtin::name_of(stem)))
        {
            match super::Declared::of_builtin(stem) {
                Some(d) => plugins.push(runtime.instantiate_declared(bytes, d, workspace, config)?),
                None => undeclared.push(bytes),
            }
        }
        let cold = undeclared.iter().filter(|b| !runtime.is_cached(b)).count();
        if cold > 0 && super::host_impl::progress_shown() {
            eprintln!(
                "kiln: compiling {} (first run; cached afterwards)…",
                kiln_protocol::terminal::count(cold, "built-in plugin", "built-in plugins")
            );
        }
        let checked: Vec<Result<super::Checked, PluginError>> = std::thread::scope(|s| {
            let handles: Vec<_> = undeclared
                .iter()
                .map(|bytes| s.spawn(move || runtime.check_bytes(bytes, Source::Builtin)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("compiling a built-in plugin panicked"))
                .collect()
        });
        for c in checked {
            plugins.push(runtime.instantiate(c?, workspace, config).await?);
        }
        let mut reg = Registry {
            builtins: builtin::BUILTINS
                .iter()
                .map(|(stem, _)| builtin::name_of(stem))
                .collect(),
            plugins,
            broken: Vec::new(),
        };
        for (section, pc) in &config.plugins {
            let Some(path) = &pc.path else { continue };
            if !needed.wants(section) && !pc.replaces.as_deref().is_some_and(|r| needed.wants(r)) {
                continue;
            }
            let loaded = match runtime.check_file(path) {
                Ok(checked) => runtime.instantiate(checked, workspace, config).await,
                Err(e) => Err(e),
            };
            let admitted = loaded.and_then(|p| {
                if let Some(first) = reg.user_plugin(&p.name) {
                    return Err(PluginError::Duplicate {
                        name: p.name.clone(),
                        first: first.source.to_string(),
                        second: p.source.to_string(),
                    });
                }
                reg.admit(p, Some(section), config)
            });
            if let Err(e) = admitted {
                // A command naming the section (or the built-in it was meant to replace, named
                // by `replaces` or by the section itself) gets this error, never a plugin
                // silently missing or the built-in in its place.
                let message = e.to_string();
                for name in [Some(section.as_str()), pc.replaces.as_deref()]
                    .into_iter()
                    .flatten()
                {
                    reg.plugins
                        .retain(|p| !(p.name == name && p.source == Source::Builtin));
                    if !reg.broken.iter().any(|(n, _)| n == name) {
                        reg.broken.push((name.to_string(), message.clone()));
                    }
                }
            }
        }
        reg.plugins.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(reg)
    }

    /// Add a plugin loaded elsewhere (for example `--plugin FILE`); it replaces a configured
    /// user plugin of the same name. Taking a built-in's name needs `replaces = "NAME"` in
    /// the plugin's `[plugins.NAME]` section.
    pub fn insert(&mut self, plugin: Plugin, config: &Config) -> Result<(), PluginError> {
        if let Some(p) = self.user_plugin(&plugin.name)
            && p.source == plugin.source
        {
            return Ok(());
        }
        self.plugins
            .retain(|p| !(p.name == plugin.name && p.source != Source::Builtin));
        self.admit(plugin, None, config)?;
        self.plugins.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Problems with configured user plugins, one line each (naming the plugin and its file).
    pub fn warnings(&self) -> impl Iterator<Item = String> + '_ {
        self.broken
            .iter()
            .map(|(name, why)| format!("plugin `{name}` skipped: {why}"))
    }

    /// `[plugins.NAME]` sections that look like a misspelt plugin name: no `path`, not a
    /// built-in, not a loaded plugin nor another section's plugin, and close to one of those
    /// (a section for a plugin loaded with `--plugin` in other runs is left alone). Each is
    /// ignored, so its grants go nowhere; the warning says so, with the closest real name.
    pub fn unknown_sections(&self, config: &Config) -> Vec<String> {
        let mut names: Vec<&str> = self.builtins.iter().map(String::as_str).collect();
        names.extend(self.plugins.iter().map(|p| p.name.as_str()));
        names.extend(
            config
                .plugins
                .iter()
                .filter(|(_, pc)| pc.path.is_some())
                .map(|(s, _)| s.as_str()),
        );
        config
            .plugins
            .iter()
            .filter(|(s, pc)| {
                pc.path.is_none()
                    && !names.contains(&canonical(s))
                    && config.file_sections.contains(*s)
            })
            .filter_map(|(s, _)| {
                let close = kiln_config::suggest::did_you_mean(s, names.iter().copied())?;
                Some(format!(
                    "[plugins.{s}] names no plugin (no built-in or loaded plugin has that name, and it gives no `path`), so its settings are ignored; did you mean `{close}`?"
                ))
            })
            .collect()
    }

    fn user_plugin(&self, name: &str) -> Option<&Plugin> {
        self.plugins
            .iter()
            .find(|p| p.name == name && p.source != Source::Builtin)
    }

    /// Add a user plugin, enforcing the `replaces` rule.
    fn admit(
        &mut self,
        plugin: Plugin,
        section: Option<&str>,
        config: &Config,
    ) -> Result<(), PluginError> {
        let name = plugin.name.clone();
        // `replaces` may be said in the section that loads the plugin or in the section of
        // its name (the one its grants come from).
        let replaces = section
            .and_then(|s| config.plugins.get(s))
            .and_then(|pc| pc.replaces.clone())
            .or_else(|| config.plugins.get(&name).and_then(|pc| pc.replaces.clone()));
        let is_builtin = self.builtins.contains(&name);
        match replaces.as_deref() {
            Some(r) if !self.builtins.iter().any(|b| b == r) => {
                return Err(PluginError::Replaces {
                    source_name: plugin.source.to_string(),
                    message: format!(
                        "`replaces = \"{r}\"` names no built-in plugin (built-ins: {})",
                        self.builtins.join(", ")
                    ),
                });
            }
            Some(r) if r != name => {
                return Err(PluginError::Replaces {
                    source_name: plugin.source.to_string(),
                    message: format!(
                        "`replaces = \"{r}\"`, but the plugin is named `{name}`; a plugin replaces the built-in of its own name"
                    ),
                });
            }
            Some(_) => {}
            None if is_builtin => {
                return Err(PluginError::ShadowsBuiltin {
                    source_name: plugin.source.to_string(),
                    name,
                });
            }
            None => {}
        }
        if is_builtin {
            self.plugins.retain(|p| p.name != name);
        }
        self.plugins.push(plugin);
        Ok(())
    }

    /// Every plugin, sorted by name.
    pub fn all(&self) -> &[Plugin] {
        &self.plugins
    }

    /// A plugin by name, of the given kind if one is given.
    pub fn get(&self, name: &str, kind: Option<PluginKind>) -> Result<&Plugin, PluginError> {
        let name = canonical(name);
        if !self.plugins.iter().any(|p| p.name == name)
            && let Some((_, why)) = self.broken.iter().find(|(n, _)| n == name)
        {
            return Err(PluginError::Unavailable {
                name: name.into(),
                message: why.clone(),
            });
        }
        match self.plugins.iter().find(|p| p.name == name) {
            Some(p) => match kind {
                Some(k) if p.kind != k => Err(PluginError::WrongKind {
                    plugin: name.into(),
                    actual: p.kind,
                    expected: k,
                }),
                _ => Ok(p),
            },
            None => {
                // A command loads only the plugins it names, so the built-ins it did not
                // load are listed by name too.
                let mut known: Vec<&str> = self
                    .plugins
                    .iter()
                    .filter(|p| kind.is_none_or(|k| p.kind == k))
                    .map(|p| p.name.as_str())
                    .chain(self.builtins.iter().map(String::as_str))
                    .collect();
                known.sort_unstable();
                known.dedup();
                Err(PluginError::NotFound {
                    kind: kind.map_or("plugin".to_string(), |k| format!("{k} plugin")),
                    name: name.into(),
                    hint: kiln_config::suggest::hint(name, known.iter().copied()),
                    known: known.join(", "),
                })
            }
        }
    }
}
