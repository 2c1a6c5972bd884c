//! Capabilities: what a plugin requests (its manifest), what the user grants (`kiln.toml`),
//! and the effective set (request ∩ grant, deny by default). This module is pure policy and is
//! the only place that builds a plugin's `WasiCtx`.

use super::bindings::types;
use crate::config::{Access, PluginConfig};
use std::path::{Path, PathBuf};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// Where the workspace appears inside every plugin.
pub const GUEST_WORKSPACE: &str = "/workspace";

/// Host defaults, used where neither the plugin nor the user asks for less.
pub const DEFAULT_MEMORY_MIB: u32 = 256;
/// Default deadline per plugin call.
pub const DEFAULT_TIMEOUT_MS: u32 = 30_000;
/// Default cap on returned and captured output.
pub const DEFAULT_OUTPUT_BYTES: u32 = 4 << 20;

use crate::path::normalize;
pub use crate::path::{check_relative, glob_match};

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
    /// Limits.
    pub limits: Limits,
    /// Paths outside the workspace that programs may write (the grant's `write`, `~/`
    /// expanded); a manifest cannot ask for any. Enforced with Landlock (`confine`).
    pub write: Vec<PathBuf>,
    /// Programs may use TCP (the grant's `net`).
    pub net: bool,
    /// Refuse to run programs that Landlock cannot fully confine (`[sandbox]
    /// require_confinement`).
    pub require_confinement: bool,
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
        /// The capability.
        what: String,
    },
    /// Requested but not granted.
    #[error(
        "{what} is not granted to plugin `{plugin}`; to allow it add to kiln.toml:\n  [plugins.{plugin}]\n  {line}"
    )]
    NotGranted {
        /// Plugin name.
        plugin: String,
        /// The capability.
        what: String,
        /// The `kiln.toml` line that would grant it.
        line: String,
    },
}

fn toml_str(s: &str) -> String {
    format!("{s:?}")
}

impl Effective {
    /// Compute request ∩ grant.
    pub fn compute(request: &types::Manifest, grant: &PluginConfig) -> Effective {
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
        let env = request
            .env
            .iter()
            .filter(|n| granted_env.contains(n))
            .cloned()
            .collect();
        let min = |a: Option<u32>, b: Option<u32>, d: u32| {
            [a, b].into_iter().flatten().min().unwrap_or(d)
        };
        let limits = Limits {
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
        };
        let write = grant
            .write
            .iter()
            .flatten()
            .map(|p| super::confine::expand_home(p))
            .filter(|p| p.is_absolute())
            .collect();
        Effective {
            fs,
            exec_requested,
            exec_granted,
            env,
            limits,
            write,
            net: grant.net == Some(true),
            require_confinement: false,
        }
    }

    /// Nothing at all (used to read a manifest before grants are known).
    pub fn none() -> Effective {
        Effective {
            fs: Vec::new(),
            exec_requested: Vec::new(),
            exec_granted: Vec::new(),
            env: Vec::new(),
            limits: Limits {
                memory_mib: DEFAULT_MEMORY_MIB,
                timeout_ms: DEFAULT_TIMEOUT_MS,
                output_bytes: DEFAULT_OUTPUT_BYTES,
            },
            write: Vec::new(),
            net: false,
            require_confinement: false,
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
            let pats = if args.is_empty() {
                String::new()
            } else {
                ", args = [\"*\"]".to_string()
            };
            return Err(Denial::NotGranted {
                plugin: plugin.into(),
                what,
                line: format!("exec = [{{ program = {}{pats} }}]", toml_str(program)),
            });
        }
        Ok(())
    }

    /// Check that variable `name` may be passed to a program.
    pub fn check_env(&self, plugin: &str, name: &str) -> Result<(), Denial> {
        if self.env.iter().any(|n| n == name) {
            return Ok(());
        }
        Err(Denial::NotGranted {
            plugin: plugin.into(),
            what: format!("environment variable `{name}`"),
            line: format!("env = [{}]", toml_str(name)),
        })
    }

    /// Build the plugin's WASI context: no environment, no arguments, no sockets, stdio
    /// discarded, and the effective paths of `workspace` preopened under `/workspace`.
    /// The guest's stderr goes to `stderr` (bounded), so a panic message can be reported.
    pub fn wasi_ctx(
        &self,
        workspace: &Path,
        stderr: MemoryOutputPipe,
    ) -> Result<WasiCtx, std::io::Error> {
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr);
        for (rel, access) in &self.fs {
            let host = if rel.is_empty() {
                workspace.to_path_buf()
            } else {
                workspace.join(rel)
            };
            if !host.is_dir() {
                continue;
            }
            let guest = if rel.is_empty() {
                GUEST_WORKSPACE.to_string()
            } else {
                format!("{GUEST_WORKSPACE}/{rel}")
            };
            let perms = match access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            b.preopened_dir(&host, &guest, perms).map_err(|e| {
                std::io::Error::other(format!("cannot preopen {}: {e}", host.display()))
            })?;
        }
        Ok(b.build())
    }
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ExecGrant, FsGrant};

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
                .contains("env = [\"SECRET\"]")
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
        let home = std::path::PathBuf::from(std::env::var("HOME").unwrap());
        assert_eq!(
            e.write,
            vec![home.join(".cache/tool"), PathBuf::from("/opt/cache")]
        );
        assert!(e.net);
    }
}
