//! {{name}}: a kiln runner. Build: cargo build --target wasm32-wasip2 --release

wit_bindgen::generate!({ path: "wit", world: "runner-plugin" });

use exports::kiln::plugin::runner::{Guest, RunRequest, RunResult, RunnerInfo};
use kiln::plugin::types::{Error, Limits, Manifest};

struct Plugin;

impl Guest for Plugin {
    fn get_manifest() -> Manifest {
        Manifest {
            name: "{{name}}".into(),
            version: "0.1.0".into(),
            description: "A kiln runner".into(),
            fs: vec![],
            // Programs this runner runs through kiln's exec import, e.g.
            // ExecRequest { program: "make".into(), args: vec!["*".into()] }
            exec: vec![],
            env: vec![],
            limits: Limits { memory_mib: None, timeout_ms: None, output_bytes: None },
        }
    }

    fn describe() -> RunnerInfo {
        RunnerInfo { name: "{{name}}".into(), description: "A kiln runner".into(), languages: vec![], patterns: vec![] }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        // Replace with a real check: kiln::plugin::exec::run(&Command { .. }) runs a granted program.
        Ok(RunResult {
            ok: true,
            exit_code: 0,
            stdout: format!("checked {}\n", request.targets.join(", ")),
            stderr: String::new(),
            duration_ms: 0,
            diagnostics: vec![],
            truncated: false,
            timed_out: false,
        })
    }
}

export!(Plugin);
