//! Test plugin: a tool plugin whose tools try to leave the sandbox (read outside the
//! workspace, write to it read-only, run programs, read the environment, spin forever, grow
//! memory without bound, return huge output). The integration tests assert that the host
//! refuses or stops each attempt and keeps running.
// Tests set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln_guest::tool::{self, Access, Error, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};

struct Escape;

fn arg(args: &Value, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Tool for Escape {
    fn manifest() -> Manifest {
        let mut m = tool::manifest(
            "escape",
            "0.1.0",
            "Tries to escape its sandbox (test fixture)",
        )
        .with_fs(".", Access::ReadWrite)
        .with_exec("*", &["*"])
        .with_env("KILN_TEST_VISIBLE")
        .with_env("KILN_TEST_SECRET_KEY");
        // Asks for far more memory than any host should give: the grant or the host default
        // must win.
        m.limits.memory_mib = Some(8192);
        m
    }

    fn list_tools() -> Vec<ToolSpec> {
        let mut tools: Vec<ToolSpec> = [
            "read", "write", "fs", "exec", "env", "spin", "grow", "flood", "panic",
        ]
        .iter()
        .map(|n| tool::spec(n, "escape attempt", r#"{"type":"object"}"#, false))
        .collect();
        // Read-only and slow: lets the agent tests observe parallel execution.
        tools.push(tool::spec(
            "nap",
            "sleep for `ms` milliseconds (read-only)",
            r#"{"type":"object"}"#,
            true,
        ));
        tools
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        let args: Value =
            serde_json::from_str(&arguments).map_err(|e| Error::InvalidInput(e.to_string()))?;
        match name.as_str() {
            "read" => std::fs::read_to_string(arg(&args, "path"))
                .map(|s| json!({ "content": s }).to_string())
                .map_err(|e| Error::Denied(format!("read failed: {e}"))),
            "write" => std::fs::write(arg(&args, "path"), arg(&args, "content"))
                .map(|_| "{}".to_string())
                .map_err(|e| Error::Denied(format!("write failed: {e}"))),
            "fs" => fs_op(&args)
                .map(|()| "{}".to_string())
                .map_err(|e| Error::Denied(format!("{} failed: {e}", arg(&args, "op")))),
            "exec" => {
                let program = arg(&args, "program");
                let argv: Vec<String> = args
                    .get("args")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut cmd = tool::command(&program, &argv);
                if let Some(env) = args.get("env").and_then(Value::as_object) {
                    cmd.env = env
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect();
                }
                if let Some(cwd) = args.get("cwd").and_then(Value::as_str) {
                    cmd.cwd = Some(cwd.to_string());
                }
                cmd.timeout_ms = args
                    .get("timeout_ms")
                    .and_then(Value::as_u64)
                    .map(|t| t as u32);
                let out = tool::exec(&cmd)?;
                Ok(json!({
                    "exit_code": out.exit_code,
                    "stdout_len": out.stdout.len(),
                    "stdout": String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(4096)]),
                    "stderr": String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(4096)]),
                    "truncated": out.truncated,
                    "timed_out": out.timed_out,
                })
                .to_string())
            }
            "env" => {
                let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
                Ok(json!({ "vars": vars }).to_string())
            }
            "spin" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "flood" => {
                let mib = args.get("mib").and_then(Value::as_u64).unwrap_or(64) as usize;
                Ok("x".repeat(mib << 20))
            }
            "panic" => panic!("deliberate panic in the escape plugin"),
            "nap" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(100);
                let cmd = tool::command("sleep", &[format!("{}", ms as f64 / 1000.0)]);
                tool::exec(&cmd)?;
                Ok(json!({ "slept_ms": ms }).to_string())
            }
            other => Err(Error::InvalidInput(format!("unknown tool {other}"))),
        }
    }
}

/// One filesystem change `op` on `path` (and `to`): each way a guest can create, change,
/// remove or rename an entry through `wasi:filesystem`.
fn fs_op(args: &Value) -> std::io::Result<()> {
    use std::io::Write;
    let (path, to) = (arg(args, "path"), arg(args, "to"));
    let content = arg(args, "content");
    match arg(args, "op").as_str() {
        "create" => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?
            .write_all(content.as_bytes()),
        "overwrite" => std::fs::write(&path, &content),
        "modify" => std::fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .write_all(content.as_bytes()),
        "append" => std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(content.as_bytes()),
        "truncate" => std::fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .set_len(0),
        "touch" => std::fs::File::open(&path)?.set_modified(std::time::SystemTime::UNIX_EPOCH),
        "mkdir" => std::fs::create_dir(&path),
        "remove" => std::fs::remove_file(&path),
        "rmdir" => std::fs::remove_dir(&path),
        "rename" => std::fs::rename(&path, &to),
        "link" => std::fs::hard_link(&path, &to),
        other => Err(std::io::Error::other(format!("unknown op {other}"))),
    }
}

kiln_guest::export_tool!(Escape);
