//! What a plugin is and where it came from: [`PluginKind`] (the world it implements) and
//! [`Source`] (built-in or a `.wasm` file).

use std::fmt;

/// How a built-in component is named in messages about compiling or checking it.
pub(crate) const BUILTIN_SOURCE: &str = "built-in plugin";
use std::path::PathBuf;

/// The kind of a plugin, from the world it implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// `runner-plugin`.
    Runner,
    /// `edit-format-plugin`.
    EditFormat,
    /// `tool-plugin`.
    Tool,
}

impl PluginKind {
    /// The WIT world name.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Runner => "runner-plugin",
            PluginKind::EditFormat => "edit-format-plugin",
            PluginKind::Tool => "tool-plugin",
        }
    }
    /// The interface a component of this kind exports (`kiln:plugin/<interface>`).
    pub(super) fn interface(self) -> &'static str {
        match self {
            PluginKind::Runner => "runner",
            PluginKind::EditFormat => "edit-format",
            PluginKind::Tool => "tool",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Runner => "runner",
            PluginKind::EditFormat => "edit-format",
            PluginKind::Tool => "tool",
        })
    }
}

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "path")]
pub enum Source {
    /// Embedded in the binary.
    Builtin,
    /// A `.wasm` file.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin => f.write_str("built-in"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}
