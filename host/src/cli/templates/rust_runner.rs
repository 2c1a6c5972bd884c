//! {{name}}: a kiln runner, written with the kiln-guest SDK (vendored in kiln-guest/).
//! Build: cargo build --target wasm32-wasip2 --release

use kiln_guest::runner::{self, Error, Manifest, RunRequest, RunResult, Runner};

struct Plugin;

impl Runner for Plugin {
    fn manifest() -> Manifest {
        // Request the programs this runner runs through kiln's exec import, e.g.
        // `.with_exec("make", &["*"])`, and the workspace with `.with_fs(".", Access::Read)`.
        runner::manifest("{{name}}", "0.1.0", "A kiln runner")
    }

    // `describe` defaults to the manifest's name and description, for any language and file;
    // override it to list languages and file patterns.

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        // Replace with a real check: `runner::exec(&runner::command("make", &request.targets))?`
        // runs a granted program, and `kiln_guest::diagnostics::parse` reads
        // `file:line:col: severity: message` lines from its output (`runner::to_wit_diagnostics`).
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

kiln_guest::export_runner!(Plugin);
