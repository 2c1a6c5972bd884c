//! Capabilities: what a plugin requests (its manifest), what the user grants (`kiln.toml`),
//! and the effective set (request ∩ grant, deny by default). This module is pure policy and is
//! the only place that builds a plugin's `WasiCtx`.

use super::bindings::types;
use kiln_config::{Access, PluginConfig};
use std::path::{Path, PathBuf};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// Where the workspace appears inside every plugin.
pub const GUEST_WORKSPACE: &str = "/workspace";

/// Host defaults, used where neither the plugin nor the user asks for less (they sit beside
/// the `[plugins.NAME]` fields they default).
pub use kiln_config::{DEFAULT_MEMORY_MIB, DEFAULT_OUTPUT_BYTES, DEFAULT_TIMEOUT_MS};

use kiln_config::path::normalize;
use kiln_config::path::{check_relative, glob_match};

/// An exec rule: program pattern and argument patterns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExecRule {
    /// Program glob.
    pub program: String,
    /// Argument globs; the last applies to all remaining arguments; empty allows none.
    pub args: Vec<String>,
}

impl ExecRule {
    /// Whether `program args...` fits this rule.
    pub fn allows(&self, program: &str, args: &[String]) -> bool {
        if !glob_match(&self.program, program) {
            return false;
        }
        if self.args.is_empty() {
            return args.is_empty();
        }
        args.iter()
            .enumerate()
            .all(|(i, a)| glob_match(&self.args[i.min(self.args.len() - 1)], a))
    }
}

/// Effective resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Memory per instance, MiB.
    pub memory_mib: u32,
    /// Deadline per call, ms.
    pub timeout_ms: u32,
    /// Output cap, bytes.
    pub output_bytes: u32,
}

/// The effective capabilities of one plugin: request ∩ grant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Effective {
    /// Workspace-relative paths preopened for the plugin, with their access.
    pub fs: Vec<(String, Access)>,
    /// A call is allowed when it fits one requested rule and one granted rule.
    pub exec_requested: Vec<ExecRule>,
    /// Exec rules granted by the user.
    pub exec_granted: Vec<ExecRule>,
    /// Environment variable names passed to programs.
    pub env: Vec<String>,
    /// Environment variable names the manifest requests (to tell "not requested" from
    /// "not granted" in a denial).
    #[serde(skip)]
    pub env_requested: Vec<String>,
    /// Memory, deadline and output size, each the lower of the request and the grant.
    pub limits: Limits,
    /// Paths outside the workspace that programs may write (the grant's `write`, `~/`
    /// expanded); a manifest cannot ask for any. Enforced with Landlock (`confine`).
    pub write: Vec<PathBuf>,
    /// Paths outside the workspace that programs may read (the grant's `read`, `~/`
    /// expanded); a manifest cannot ask for any. Enforced with Landlock (`confine`).
    pub read: Vec<PathBuf>,
    /// Where programs may write: the workspace and grants, or (the review phase) nowhere.
    pub writes: kiln_sandbox::Writes,
    /// Programs may use the network (the grant's `net`).
    pub net: bool,
    /// Refuse to run programs that Landlock cannot fully confine (`[sandbox]
    /// require_confinement`).
    pub require_confinement: bool,
    /// `[sandbox] protect` globs: kept read-only in the view of every program (with `.git`,
    /// `kiln.toml` and `.kiln`, which are always).
    pub protect: Vec<String>,
}

/// Why a capability check failed; rendered as the WIT `denied` text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The plugin's manifest does not request it.
    #[error(
        "plugin `{plugin}` does not request {what} in its manifest; a plugin can only be granted what it requests"
    )]
    NotRequested {
        /// Plugin name.
        plugin: String,
        /// The capability asked for (a path, a program, a variable, the network).
        what: String,
    },
    /// Requested but not granted.
    #[error(
        "{what} is not granted to plugin `{plugin}`; to allow it, put in kiln.toml (this line replaces the section's `{key}` line, if it has one):\n  [plugins.{plugin}]\n  {line}"
    )]
    NotGranted {
        /// Plugin name.
        plugin: String,
        /// The capability asked for (a path, a program, a variable, the network).
        what: String,
        /// The `kiln.toml` key the line sets.
        key: &'static str,
        /// The `kiln.toml` line that grants it together with what is granted already.
        line: String,
    },
    /// Asked in a form no grant can allow.
    #[error("{what} cannot be granted to plugin `{plugin}`: {why}")]
    Unusable {
        /// Plugin name.
        plugin: String,
        /// The capability asked for (a path, a program, a variable, the network).
        what: String,
        /// Why, and what would work.
        why: String,
    },
}

/// `s` as a TOML basic string.
pub fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl ExecRule {
    /// The rule as a `kiln.toml` inline table.
    pub fn toml(&self) -> String {
        let mut s = format!("{{ program = {}", toml_str(&self.program));
        if !self.args.is_empty() {
            let args: Vec<String> = self.args.iter().map(|a| toml_str(a)).collect();
            s.push_str(&format!(", args = [{}]", args.join(", ")));
        }
        s.push_str(" }");
        s
    }
}

/// The filesystem entries both the manifest requests and the grant allows: for each pair of
/// paths where one contains the other, the deeper path with the lesser access; a read-write
/// entry subsumes a read-only one for the same path.
fn granted_fs(request: &types::Manifest, grant: &PluginConfig) -> Vec<(String, Access)> {
    let mut fs = Vec::new();
    for r in &request.fs {
        if check_relative(&r.path).is_err() {
            continue;
        }
        let r_access = match r.access {
            types::Access::Read => Access::Read,
            types::Access::ReadWrite => Access::ReadWrite,
        };
        let rp = normalize(&r.path);
        for g in grant.fs.iter().flatten() {
            let (gp_str, g_access) = g.parts();
            if check_relative(gp_str).is_err() {
                continue;
            }
            let gp = normalize(gp_str);
            // The deeper of the two paths, if one contains the other.
            let deeper = if rp.starts_with(&gp) {
                rp.clone()
            } else if gp.starts_with(&rp) {
                gp.clone()
            } else {
                continue;
            };
            let entry = (path_string(&deeper), r_access.min(g_access));
            if !fs.contains(&entry) {
                fs.push(entry);
            }
        }
    }
    // A read-write entry subsumes a read-only one for the same path.
    let rw: Vec<String> = fs
        .iter()
        .filter(|(_, a)| *a == Access::ReadWrite)
        .map(|(p, _)| p.clone())
        .collect();
    fs.retain(|(p, a)| *a == Access::ReadWrite || !rw.contains(p));
    fs
}

/// The limits: min(request, grant or default), so a manifest may lower a limit, never raise
/// it.
fn limits(request: &types::Manifest, grant: &PluginConfig) -> Limits {
    let min = |request: Option<u32>, grant: Option<u32>, default: u32| {
        let ceiling = grant.unwrap_or(default);
        request.map_or(ceiling, |r| r.min(ceiling))
    };
    Limits {
        memory_mib: min(
            request.limits.memory_mib,
            grant.memory_mib,
            DEFAULT_MEMORY_MIB,
        ),
        timeout_ms: min(
            request.limits.timeout_ms,
            grant.timeout_ms,
            DEFAULT_TIMEOUT_MS,
        ),
        output_bytes: min(
            request.limits.output_bytes,
            grant.output_bytes,
            DEFAULT_OUTPUT_BYTES,
        ),
    }
}

impl Effective {
    /// Compute request ∩ grant.
    pub fn compute(request: &types::Manifest, grant: &PluginConfig) -> Effective {
        let fs = granted_fs(request, grant);
        let exec_requested = request
            .exec
            .iter()
            .map(|e| ExecRule {
                program: e.program.clone(),
                args: e.args.clone(),
            })
            .collect();
        let exec_granted = grant
            .exec
            .iter()
            .flatten()
            .map(|e| ExecRule {
                program: e.program.clone(),
                args: e.args.clone(),
            })
            .collect();
        let granted_env = grant.env.clone().unwrap_or_default();
        let env_requested = request.env.clone();
        let env = request
            .env
            .iter()
            .filter(|n| granted_env.contains(n))
            .cloned()
            .collect();
        let limits = limits(request, grant);
        let outside = |paths: &Option<Vec<String>>| -> Vec<PathBuf> {
            paths
                .iter()
                .flatten()
                .map(|p| super::confine::expand_home(p))
                .filter(|p| p.is_absolute())
                .collect()
        };
        let write = outside(&grant.write);
        let read = outside(&grant.read);
        Effective {
            fs,
            exec_requested,
            exec_granted,
            env,
            env_requested,
            limits,
            write,
            read,
            writes: kiln_sandbox::Writes::default(),
            net: grant.net == Some(true),
            require_confinement: false,
            protect: Vec::new(),
        }
    }

    /// Nothing at all (used to read a manifest before grants are known).
    pub fn none() -> Effective {
        Effective {
            fs: Vec::new(),
            exec_requested: Vec::new(),
            exec_granted: Vec::new(),
            env: Vec::new(),
            env_requested: Vec::new(),
            limits: Limits {
                memory_mib: DEFAULT_MEMORY_MIB,
                timeout_ms: DEFAULT_TIMEOUT_MS,
                output_bytes: DEFAULT_OUTPUT_BYTES,
            },
            write: Vec::new(),
            read: Vec::new(),
            writes: kiln_sandbox::Writes::default(),
            net: false,
            require_confinement: false,
            protect: Vec::new(),
        }
    }

    /// Check one exec call.
    pub fn check_exec(&self, plugin: &str, program: &str, args: &[String]) -> Result<(), Denial> {
        let what = format!(
            "running `{}`",
            std::iter::once(program)
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if !self.exec_requested.iter().any(|r| r.allows(program, args)) {
            return Err(Denial::NotRequested {
                plugin: plugin.into(),
                what,
            });
        }
        if !self.exec_granted.iter().any(|r| r.allows(program, args)) {
            // A grant names a program found on PATH or a workspace-relative path; an absolute
            // path (the guest's `/workspace/...` included) could never run, so say what would.
            if program.contains('/')
                && let Err(why) = check_relative(program)
            {
                let hint = match program.strip_prefix(GUEST_WORKSPACE) {
                    Some(rest) if !rest.trim_start_matches('/').is_empty() => format!(
                        "; inside the plugin the workspace is {GUEST_WORKSPACE}, so the plugin should run `./{}`",
                        rest.trim_start_matches('/')
                    ),
                    _ => String::new(),
                };
                return Err(Denial::Unusable {
                    plugin: plugin.into(),
                    what,
                    why: format!(
                        "the program `{program}` {why}; programs are named as found on PATH (`gcc`) or by a path relative to the workspace (`./build.sh`){hint}"
                    ),
                });
            }
            let new = ExecRule {
                program: program.to_string(),
                args: if args.is_empty() {
                    Vec::new()
                } else {
                    vec!["*".into()]
                },
            };
            let rules: Vec<String> = self
                .exec_granted
                .iter()
                .chain(std::iter::once(&new))
                .map(ExecRule::toml)
                .collect();
            return Err(Denial::NotGranted {
                plugin: plugin.into(),
                what,
                key: "exec",
                line: format!("exec = [{}]", rules.join(", ")),
            });
        }
        Ok(())
    }

    /// Check that variable `name` may be passed to a program.
    pub fn check_env(&self, plugin: &str, name: &str) -> Result<(), Denial> {
        if self.env.iter().any(|n| n == name) {
            return Ok(());
        }
        let what = format!("environment variable `{name}`");
        // Granting a variable the manifest does not request would change nothing.
        if !self.env_requested.iter().any(|n| n == name) {
            return Err(Denial::NotRequested {
                plugin: plugin.into(),
                what,
            });
        }
        let names: Vec<String> = self
            .env
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(name))
            .map(toml_str)
            .collect();
        Err(Denial::NotGranted {
            plugin: plugin.into(),
            what,
            key: "env",
            line: format!("env = [{}]", names.join(", ")),
        })
    }

    /// The requested paths this grant does not give in full (path, access), workspace-relative
    /// (`.` for the root). Requests no grant could satisfy (absolute, `..`) are not listed:
    /// see [`unusable_fs`].
    pub fn missing_fs(&self, request: &types::Manifest) -> Vec<(String, Access)> {
        let mut missing = Vec::new();
        for r in &request.fs {
            if check_relative(&r.path).is_err() {
                continue;
            }
            let access = match r.access {
                types::Access::Read => Access::Read,
                types::Access::ReadWrite => Access::ReadWrite,
            };
            let rp = normalize(&r.path);
            let covered = self
                .fs
                .iter()
                .any(|(g, a)| rp.starts_with(normalize(g)) && *a >= access);
            let entry = (display_rel(&rp), access);
            if !covered && !missing.contains(&entry) {
                missing.push(entry);
            }
        }
        missing
    }

    /// The `kiln.toml` line granting what is granted now plus `missing` (relative paths).
    pub fn fs_grant_line(&self, missing: &[(String, Access)]) -> String {
        let items: Vec<String> = self
            .fs
            .iter()
            .map(|(p, a)| (display_rel(Path::new(p)), *a))
            // A path granted read-only and missing read-write is listed once, read-write.
            .filter(|(p, _)| !missing.iter().any(|(m, _)| m == p))
            .chain(missing.iter().cloned())
            .map(|(p, a)| match a {
                Access::Read => toml_str(&p),
                Access::ReadWrite => {
                    format!("{{ path = {}, access = \"read-write\" }}", toml_str(&p))
                }
            })
            .collect();
        format!("fs = [{}]", items.join(", "))
    }

    /// Build the plugin's WASI context: no environment, no arguments, no sockets, stdio
    /// discarded, and the effective paths of `workspace` preopened under `/workspace`.
    /// The guest's stderr goes to `stderr` (bounded), so a panic message can be reported.
    ///
    /// Every preopen is opened from `root` (the workspace's cap-std `Dir`), so a granted path
    /// that is a symlink, or runs through one, cannot leave the workspace: the grant is
    /// refused, naming it. The opened directory is handed to wasmtime-wasi through its file
    /// descriptor (`/proc/self/fd/N`), never by re-resolving its path.
    pub fn wasi_ctx(
        &self,
        root: &cap_std::fs::Dir,
        stderr: MemoryOutputPipe,
    ) -> Result<WasiCtx, std::io::Error> {
        use std::os::fd::AsRawFd;
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr);
        for (rel, access) in &self.fs {
            if *access == Access::ReadWrite {
                refuse_symlinks(root, rel)?;
            }
            let dir = if rel.is_empty() {
                root.try_clone()?
            } else {
                match root.open_dir(rel) {
                    Ok(d) => d,
                    // A grant of a directory that does not exist (yet) preopens nothing.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
                    Err(e) => {
                        return Err(std::io::Error::other(format!(
                            "the grant of `{rel}` cannot be opened inside the workspace \
                             (a symlink that leads out of it is refused): {e}"
                        )));
                    }
                }
            };
            let guest = if rel.is_empty() {
                GUEST_WORKSPACE.to_string()
            } else {
                format!("{GUEST_WORKSPACE}/{rel}")
            };
            let perms = match access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            let host = format!("/proc/self/fd/{}", dir.as_raw_fd());
            b.preopened_dir(&host, &guest, perms).map_err(|e| {
                std::io::Error::other(format!("cannot preopen the grant of `{rel}`: {e}"))
            })?;
            drop(dir);
        }
        Ok(b.build())
    }

    /// Refuse a read-write grant that covers a protected path (`kiln.toml`, `.kiln/`,
    /// `.git/`, `[sandbox] protect`), suggesting the sub-directories that could be granted.
    pub fn check_protected(
        &self,
        plugin: &str,
        protected: &kiln_config::path::Protected,
        workspace: &Path,
    ) -> Result<(), ProtectedGrant> {
        for (rel, access) in &self.fs {
            if *access != Access::ReadWrite {
                continue;
            }
            let Some(why) = protected.covered_by(rel) else {
                continue;
            };
            let shown = if rel.is_empty() { "." } else { rel.as_str() };
            let base = if rel.is_empty() {
                workspace.to_path_buf()
            } else {
                workspace.join(rel)
            };
            let mut subdirs: Vec<String> = std::fs::read_dir(&base)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if rel.is_empty() {
                        name
                    } else {
                        format!("{rel}/{name}")
                    }
                })
                .filter(|d| protected.covered_by(d).is_none())
                .collect();
            subdirs.sort();
            let suggestion = if subdirs.is_empty() {
                "grant read-write on a directory that holds no protected path".to_string()
            } else {
                format!(
                    "grant the sub-directories it may write instead, e.g.\n  [plugins.{plugin}]\n  fs = [{}]",
                    subdirs
                        .iter()
                        .take(8)
                        .map(|d| format!("{{ path = {d:?}, access = \"read-write\" }}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(ProtectedGrant {
                path: shown.to_string(),
                plugin: plugin.to_string(),
                why: why.to_string(),
                suggestion,
            });
        }
        Ok(())
    }
}

/// A read-write grant that covers a protected path (`kiln.toml`, `.kiln/`, `.git/`,
/// `[sandbox] protect`), refused with the sub-directories that could be granted instead.
#[derive(Debug, thiserror::Error)]
#[error("read-write access to `{path}` is refused for plugin `{plugin}`: {why}; {suggestion}")]
pub struct ProtectedGrant {
    /// The granted path as kiln.toml names it (`.` for the workspace root).
    pub path: String,
    /// The plugin the grant is for.
    pub plugin: String,
    /// Which protected path the grant covers, and why that path is protected.
    pub why: String,
    /// What to grant instead.
    pub suggestion: String,
}

/// A read-write grant must name a real directory: a symlink on the way (`docs -> .git`) could
/// hand a plugin write access to a protected path under another name.
fn refuse_symlinks(root: &cap_std::fs::Dir, rel: &str) -> Result<(), std::io::Error> {
    let mut prefix = std::path::PathBuf::new();
    for part in Path::new(rel).components() {
        prefix.push(part);
        match root.symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(std::io::Error::other(format!(
                    "the read-write grant of `{rel}` is refused: `{}` is a symbolic link; \
                     grant the real directory instead",
                    prefix.display()
                )));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A normalised relative path as written in `kiln.toml` (`.` for the workspace root).
fn display_rel(p: &Path) -> String {
    let s = path_string(p);
    if s.is_empty() { ".".into() } else { s }
}

/// Manifest paths no grant can satisfy (absolute, `..`), with why.
pub fn unusable_fs(request: &types::Manifest) -> Vec<(String, &'static str)> {
    request
        .fs
        .iter()
        .filter_map(|r| {
            check_relative(&r.path)
                .err()
                .map(|why| (r.path.clone(), why))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_config::{ExecGrant, FsGrant};

    fn manifest() -> types::Manifest {
        types::Manifest {
            name: "p".into(),
            version: "0".into(),
            description: String::new(),
            fs: vec![
                types::FsRequest {
                    path: ".".into(),
                    access: types::Access::ReadWrite,
                },
                types::FsRequest {
                    path: "docs".into(),
                    access: types::Access::Read,
                },
            ],
            exec: vec![types::ExecRequest {
                program: "*".into(),
                args: vec!["*".into()],
            }],
            env: vec!["CC".into(), "SECRET".into()],
            limits: types::Limits {
                memory_mib: Some(64),
                timeout_ms: None,
                output_bytes: None,
            },
        }
    }

    #[test]
    fn deny_by_default() {
        let e = Effective::compute(&manifest(), &PluginConfig::default());
        assert!(e.fs.is_empty() && e.env.is_empty() && e.exec_granted.is_empty());
        assert!(matches!(
            e.check_exec("p", "gcc", &[]),
            Err(Denial::NotGranted { .. })
        ));
        assert_eq!(e.limits.memory_mib, 64);
        assert_eq!(e.limits.timeout_ms, DEFAULT_TIMEOUT_MS);
    }

    #[test]
    fn intersection_narrows_paths_access_env_and_exec() {
        let grant = PluginConfig {
            fs: Some(vec![
                FsGrant::Path("src".into()),
                FsGrant::Full {
                    path: "docs".into(),
                    access: Access::ReadWrite,
                },
            ]),
            exec: Some(vec![ExecGrant {
                program: "gcc".into(),
                args: vec!["-c".into(), "*.c".into()],
            }]),
            env: Some(vec!["CC".into(), "OTHER".into()]),
            memory_mib: Some(512),
            ..Default::default()
        };
        let e = Effective::compute(&manifest(), &grant);
        assert_eq!(
            e.fs,
            vec![
                ("src".to_string(), Access::Read),
                ("docs".to_string(), Access::ReadWrite)
            ]
        );
        assert_eq!(e.env, vec!["CC".to_string()]);
        assert_eq!(e.limits.memory_mib, 64, "the smaller of request and grant");
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            e.check_exec("p", "gcc", &args(&["-c", "a.c", "b.c"]))
                .is_ok()
        );
        let err = e
            .check_exec("p", "gcc", &args(&["-o", "x"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[plugins.p]") && err.contains("exec = [{ program = \"gcc\""),
            "{err}"
        );
        assert!(e.check_exec("p", "rm", &args(&["-rf"])).is_err());
        assert!(
            e.check_env("p", "SECRET")
                .unwrap_err()
                .to_string()
                .contains("env = [\"CC\", \"SECRET\"]")
        );
    }

    /// The grant of a denial, pasted over the section's line of that key.
    fn paste(denial: &Denial, grant: &PluginConfig) -> PluginConfig {
        let Denial::NotGranted { line, .. } = denial else {
            panic!("no suggestion in {denial}");
        };
        let pasted: PluginConfig = toml::from_str(line).unwrap();
        let mut g = grant.clone();
        if pasted.exec.is_some() {
            g.exec = pasted.exec;
        }
        if pasted.env.is_some() {
            g.env = pasted.env;
        }
        if pasted.fs.is_some() {
            g.fs = pasted.fs;
        }
        g
    }

    #[test]
    fn suggestions_work_when_pasted_and_never_repeat_a_grant() {
        let grant = PluginConfig {
            exec: Some(vec![ExecGrant {
                program: "gcc".into(),
                args: vec!["-c".into(), "*.c".into()],
            }]),
            env: Some(vec!["CC".into(), "SECRET".into()]),
            ..Default::default()
        };
        let mut m = manifest();
        m.env.push("QUOTE\"D".into());
        let e = Effective::compute(&m, &grant);
        let args = vec!["-o".to_string(), "x y".to_string()];
        let d = e.check_exec("p", "make", &args).unwrap_err();
        let e2 = Effective::compute(&m, &paste(&d, &grant));
        assert!(e2.check_exec("p", "make", &args).is_ok());
        assert!(
            e2.check_exec("p", "gcc", &["-c".into(), "a.c".into()])
                .is_ok()
        );

        let d = e.check_env("p", "QUOTE\"D").unwrap_err();
        let e2 = Effective::compute(&m, &paste(&d, &grant));
        assert!(e2.check_env("p", "QUOTE\"D").is_ok() && e2.check_env("p", "CC").is_ok());

        // Granted but not requested: granting it again would change nothing, so no line.
        let e = Effective::compute(
            &m,
            &PluginConfig {
                env: Some(vec!["OPENAI_API_KEY".into()]),
                ..Default::default()
            },
        );
        let d = e.check_env("p", "OPENAI_API_KEY").unwrap_err();
        assert!(matches!(d, Denial::NotRequested { .. }), "{d}");

        // An absolute program (the guest path included) cannot be granted: say what works.
        for program in ["/usr/bin/gcc", "/workspace/build.sh"] {
            let d = e.check_exec("p", program, &[]).unwrap_err();
            assert!(matches!(d, Denial::Unusable { .. }), "{d}");
            assert!(!d.to_string().contains("exec = ["), "{d}");
        }
        assert!(
            e.check_exec("p", "/workspace/build.sh", &[])
                .unwrap_err()
                .to_string()
                .contains("`./build.sh`")
        );
    }

    #[test]
    fn missing_paths_are_relative_and_never_absolute() {
        let mut m = manifest();
        for (path, access) in [
            ("/", types::Access::Read),
            ("../up", types::Access::Read),
            ("./src/", types::Access::Read),
        ] {
            m.fs.push(types::FsRequest {
                path: path.into(),
                access,
            });
        }
        let grant = PluginConfig {
            fs: Some(vec![FsGrant::Path("src".into())]),
            ..Default::default()
        };
        let e = Effective::compute(&m, &grant);
        let missing = e.missing_fs(&m);
        assert_eq!(
            missing,
            vec![
                (".".to_string(), Access::ReadWrite),
                ("docs".to_string(), Access::Read)
            ]
        );
        assert_eq!(
            unusable_fs(&m)
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>(),
            ["/", "../up"]
        );
        let line = e.fs_grant_line(&missing);
        assert_eq!(
            line,
            r#"fs = ["src", { path = ".", access = "read-write" }, "docs"]"#
        );
        let pasted: PluginConfig = toml::from_str(&line).unwrap();
        let e2 = Effective::compute(&m, &pasted);
        assert!(e2.missing_fs(&m).is_empty(), "{:?}", e2.fs);

        // Granted read-only but requested read-write: one entry, read-write.
        let e = Effective::compute(
            &m,
            &PluginConfig {
                fs: Some(vec![FsGrant::Path(".".into())]),
                ..Default::default()
            },
        );
        assert_eq!(
            e.fs_grant_line(&e.missing_fs(&m)),
            r#"fs = ["docs", "src", { path = ".", access = "read-write" }]"#
        );
    }

    #[test]
    fn write_paths_and_net_come_from_the_grant_only() {
        let e = Effective::compute(&manifest(), &PluginConfig::default());
        assert!(e.write.is_empty() && !e.net && !e.require_confinement);
        let grant = PluginConfig {
            write: Some(vec!["~/.cache/tool".into(), "/opt/cache".into()]),
            net: Some(true),
            ..Default::default()
        };
        let e = Effective::compute(&manifest(), &grant);
        let home = kiln_env::env().home().unwrap().to_path_buf();
        assert_eq!(
            e.write,
            vec![home.join(".cache/tool"), PathBuf::from("/opt/cache")]
        );
        assert!(e.net);
    }
}
