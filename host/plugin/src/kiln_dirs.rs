//! kiln's own directories, which no plugin grant may cover: its configuration (grants, store
//! URLs with passwords), its state (the store with every prompt and answer, journals, undo
//! backups, trust records, the compile cache's key) and its compile cache (native code kiln
//! runs unconfined). A `write` or `read` grant (or a read-write `fs` grant, for a workspace
//! that holds one of them) that is one of these, lies inside one, or contains one
//! (`write = ["~/.cache"]` contains `~/.cache/kiln`) is refused, naming both. Reading the
//! cache is allowed: its entries are signed with a key programs cannot read. One directory is
//! let through: writing the build cache kiln keeps for that plugin and workspace
//! ([`kiln_state::build_cache`]), exactly, and nothing above or beside it.

use kiln_config::{Access, PluginConfig};
use std::path::{Path, PathBuf};

/// One of kiln's directories (or files).
#[derive(Debug, Clone)]
pub struct KilnDir {
    /// What it is, for messages ("kiln's state directory").
    pub what: &'static str,
    /// Where it is, as configured.
    pub path: PathBuf,
    /// Read grants covering it are refused too.
    pub no_read: bool,
}

/// kiln's directories for this process: the configuration directory
/// (`$XDG_CONFIG_HOME/kiln`, else `~/.config/kiln`) and a `KILN_CONFIG` file, the state
/// directory ([`kiln_state::base`]) and the compile cache's key file, and the compile
/// cache: `cache_dir` (the runtime's, when it has one) and the default one.
pub fn kiln_dirs(cache_dir: Option<&Path>) -> Vec<KilnDir> {
    let mut out = Vec::new();
    let mut add = |what, path: PathBuf, no_read| {
        if path.is_absolute() {
            out.push(KilnDir {
                what,
                path,
                no_read,
            })
        }
    };
    if let Some(dir) = kiln_state::UserDir::Config.kiln_dir() {
        add("kiln's configuration directory", dir, true);
    }
    if let Some(file) = kiln_env::env().kiln_config() {
        add("kiln's configuration file", file.to_path_buf(), true);
    }
    if let Ok(state) = kiln_state::base() {
        add(
            "kiln's state directory (its store, journals, backups and keys)",
            state,
            true,
        );
    }
    if let Ok(key) = kiln_state::cache_key_path() {
        add("the compile cache's key", key, true);
    }
    let default_cache = super::cache::default_dir();
    for cache in cache_dir
        .map(Path::to_path_buf)
        .into_iter()
        .chain(default_cache)
    {
        add("kiln's compile cache (native code kiln runs)", cache, false);
    }
    out
}

/// A grant refused because it covers one of kiln's directories.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the grant `{key} = [\"{grant}\"]` of plugin `{plugin}` is refused: it {relation} {what}, {dir}; no grant may cover kiln's own configuration, state or cache; grant a directory beside it instead"
)]
pub struct KilnDirGrant {
    /// The plugin.
    pub plugin: String,
    /// The grant's key: `write`, `read` or `fs`.
    pub key: &'static str,
    /// The grant as written.
    pub grant: String,
    /// `is`, `is inside` or `contains`.
    pub relation: &'static str,
    /// What kiln keeps there.
    pub what: &'static str,
    /// The directory, resolved.
    pub dir: String,
}

/// Refuse `grant`'s paths that cover one of `dirs`: `write` paths and read-write `fs` entries
/// (workspace-relative) any of them, `read` paths those marked `no_read`.
pub fn check_grant(
    plugin: &str,
    grant: &PluginConfig,
    workspace: &Path,
    dirs: &[KilnDir],
) -> Result<(), KilnDirGrant> {
    let mut paths: Vec<(&'static str, String, PathBuf, bool)> = Vec::new();
    for w in grant.write.iter().flatten() {
        paths.push(("write", w.clone(), super::confine::expand_home(w), true));
    }
    for r in grant.read.iter().flatten() {
        paths.push(("read", r.clone(), super::confine::expand_home(r), false));
    }
    for g in grant.fs.iter().flatten() {
        let (p, access) = g.parts();
        if access == Access::ReadWrite {
            paths.push(("fs", p.to_string(), workspace.join(p), true));
        }
    }
    // The build cache kiln keeps for this plugin and workspace (`--runner go`'s `GOCACHE`):
    // a directory of the state directory made for exactly that, holding nothing else.
    let own_cache = kiln_state::build_cache_path(workspace, plugin)
        .ok()
        .flatten()
        .map(|p| kiln_state::resolve(&p));
    for (key, written, path, writes) in paths {
        if key == "write" && own_cache.as_ref() == Some(&kiln_state::resolve(&path)) {
            continue;
        }
        for d in dirs.iter().filter(|d| writes || d.no_read) {
            if let Some(relation) = overlap(&path, &d.path) {
                return Err(KilnDirGrant {
                    plugin: plugin.to_string(),
                    key,
                    grant: written,
                    relation,
                    what: d.what,
                    dir: kiln_state::resolve(&d.path).display().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// A workspace kiln refuses: one that is `/` or `$HOME`, or contains `$HOME` or one of kiln's
/// own directories. Programs kiln runs may read and write their workspace, and the fs tools
/// serve it to a model: such a workspace would hand them the user's keys and kiln's own
/// configuration (where an MCP server runs unconfined), state and cache key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kiln refuses to work in {workspace}: it {why}, which the programs kiln runs and the model's tools could read and change; run kiln inside a project directory (one holding `.git`, `kiln.toml` or `.kiln`), or name one with -C DIR"
)]
pub struct WorkspaceRefused {
    /// The workspace, resolved.
    pub workspace: String,
    /// What it is or holds: "is your home directory", "contains kiln's state directory ...".
    pub why: String,
}

/// Why `workspace` may not be one (see [`WorkspaceRefused`]), with `home` the user's home
/// directory and `dirs` kiln's directories; `None`: it may.
pub fn refuse_workspace(
    workspace: &Path,
    home: Option<&Path>,
    dirs: &[KilnDir],
) -> Option<WorkspaceRefused> {
    let ws = kiln_state::resolve(workspace);
    let refused = |why: String| {
        Some(WorkspaceRefused {
            workspace: ws.display().to_string(),
            why,
        })
    };
    if ws.parent().is_none() {
        return refused("is the root directory `/`".into());
    }
    if let Some(home) = home.filter(|h| h.is_absolute()) {
        let home = kiln_state::resolve(home);
        if home == ws {
            return refused("is your home directory".into());
        }
        if home.starts_with(&ws) {
            return refused(format!("contains your home directory {}", home.display()));
        }
    }
    for d in dirs {
        let dir = kiln_state::resolve(&d.path);
        if dir.starts_with(&ws) {
            return refused(format!("contains {}, {}", d.what, dir.display()));
        }
    }
    None
}

/// [`refuse_workspace`] for this process: its `HOME` and [`kiln_dirs`] (with the compile cache
/// `cache_dir`, when the runtime has one).
pub fn refuse_workspace_here(
    workspace: &Path,
    cache_dir: Option<&Path>,
) -> Option<WorkspaceRefused> {
    refuse_workspace(workspace, kiln_env::env().home(), &kiln_dirs(cache_dir))
}

/// How `grant` covers `dir`, as written or with links resolved: `is`, `is inside`,
/// `contains`, or `None` when neither holds the other.
fn overlap(grant: &Path, dir: &Path) -> Option<&'static str> {
    let pairs = [
        (grant.to_path_buf(), dir.to_path_buf()),
        (kiln_state::resolve(grant), kiln_state::resolve(dir)),
    ];
    for (g, d) in pairs {
        if g == d {
            return Some("is");
        }
        if g.starts_with(&d) {
            return Some("is inside");
        }
        if d.starts_with(&g) {
            return Some("contains");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(t: &Path) -> Vec<KilnDir> {
        vec![
            KilnDir {
                what: "kiln's state directory",
                path: t.join("home/.local/state/kiln"),
                no_read: true,
            },
            KilnDir {
                what: "kiln's compile cache",
                path: t.join("home/.cache/kiln"),
                no_read: false,
            },
        ]
    }

    fn grant(key: &str, path: &Path) -> PluginConfig {
        let list = Some(vec![path.display().to_string()]);
        match key {
            "write" => PluginConfig {
                write: list,
                ..Default::default()
            },
            _ => PluginConfig {
                read: list,
                ..Default::default()
            },
        }
    }

    #[test]
    fn grants_equal_to_inside_or_containing_a_kiln_dir_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let d = dirs(t.path());
        let home = t.path().join("home");
        for (key, path, relation, what) in [
            (
                "write",
                home.join(".cache"),
                "contains",
                "kiln's compile cache",
            ),
            ("write", home.clone(), "contains", "kiln's state directory"),
            (
                "write",
                home.join(".cache/kiln"),
                "is",
                "kiln's compile cache",
            ),
            (
                "write",
                home.join(".cache/kiln/components"),
                "is inside",
                "kiln's compile cache",
            ),
            (
                "read",
                home.join(".local"),
                "contains",
                "kiln's state directory",
            ),
            (
                "read",
                home.join(".local/state/kiln/workspaces"),
                "is inside",
                "kiln's state directory",
            ),
        ] {
            let e = check_grant("p", &grant(key, &path), &ws, &d).unwrap_err();
            assert_eq!((e.key, e.relation, e.what), (key, relation, what), "{e}");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
        // Beside kiln's directories, and reading the cache: allowed.
        for (key, path) in [
            ("write", home.join(".cache/cargo")),
            ("write", home.join(".cache/kilnx")),
            ("read", home.join(".cache")),
            ("read", home.join(".local/share")),
        ] {
            check_grant("p", &grant(key, &path), &ws, &d).unwrap();
        }
    }

    #[test]
    fn only_the_plugins_own_build_cache_may_be_written_in_the_state_directory() {
        let Ok(base) = kiln_state::base() else {
            return;
        };
        let ws = tempfile::tempdir().unwrap();
        let d = vec![KilnDir {
            what: "kiln's state directory",
            path: base,
            no_read: true,
        }];
        let cache = kiln_state::build_cache_path(ws.path(), "go")
            .unwrap()
            .unwrap();
        check_grant("go", &grant("write", &cache), ws.path(), &d).unwrap();
        // Another plugin, the directory above it, or reading it: refused.
        for (plugin, key, path) in [
            ("other", "write", cache.clone()),
            ("go", "write", cache.parent().unwrap().to_path_buf()),
            ("go", "read", cache.clone()),
            ("go", "write", cache.join("..").join("..")),
        ] {
            let e = check_grant(plugin, &grant(key, &path), ws.path(), &d).unwrap_err();
            assert_eq!(e.what, "kiln's state directory", "{e}");
        }
    }

    #[test]
    fn a_link_to_a_kiln_dir_is_seen_through() {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(t.path());
        std::fs::create_dir_all(&d[0].path).unwrap();
        let link = t.path().join("innocent");
        std::os::unix::fs::symlink(t.path().join("home/.local"), &link).unwrap();
        let e = check_grant("p", &grant("read", &link), t.path(), &d).unwrap_err();
        assert_eq!(e.relation, "contains", "{e}");
        let e = check_grant(
            "p",
            &grant("write", &link.join("state/kiln/../kiln/x")),
            t.path(),
            &d,
        )
        .unwrap_err();
        assert_eq!(e.relation, "is inside", "{e}");
    }
}
