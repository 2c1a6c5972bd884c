//! The `make` runner: the project's build, `make -k -w` (default) or, with `mode = "cmake"`
//! (what detection picks for a `CMakeLists.txt`), `cmake -S . -B build` then
//! `cmake --build build`. The compiler's `file:line:col: severity: message` lines (gcc, clang)
//! and CMake's own `CMake Error at CMakeLists.txt:3` become diagnostics, their paths relative
//! to the project (the build prints them absolute).
//!
//! Settings: `mode` (`make`, `cmake`), `target` (the make target), `build_dir` (cmake's,
//! default `build`), `args` (extra arguments to make or `cmake --build`, split on whitespace).

use kiln_guest::diagnostics;
use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, Output, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};

struct Make;

impl Runner for Make {
    fn manifest() -> Manifest {
        runner::manifest(
            "make",
            env!("CARGO_PKG_VERSION"),
            "make or cmake builds with gcc/clang diagnostics",
        )
        .with_exec("make", &["*"])
        .with_exec("cmake", &["*"])
        .with_env("CC")
        .with_env("CXX")
        .with_env("CFLAGS")
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "make".into(),
            description:
                "make, or cmake configure and build; compiler diagnostics through the build".into(),
            languages: vec!["c".into(), "c++".into()],
            patterns: vec!["Makefile".into(), "CMakeLists.txt".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let mode = runner::setting(&request, "mode").unwrap_or("make");
        let extra: Vec<String> = runner::setting(&request, "args")
            .map(|a| a.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let mut runs: Vec<Output> = Vec::new();
        match mode {
            "make" => {
                let mut args = vec!["-k".to_string(), "-w".into()];
                args.extend(extra);
                if let Some(t) = runner::setting(&request, "target") {
                    args.push(t.to_string());
                }
                runs.push(runner::exec(&runner::command("make", &args))?);
            }
            "cmake" => {
                let dir = runner::setting(&request, "build_dir").unwrap_or("build");
                let configure = ["-S", ".", "-B", dir].map(String::from);
                let out = runner::exec(&runner::command("cmake", &configure))?;
                let configured = out.exit_code == Some(0) && !out.timed_out;
                runs.push(out);
                if configured {
                    let mut args = vec!["--build".to_string(), dir.to_string()];
                    if let Some(t) = runner::setting(&request, "target") {
                        args.extend(["--target".to_string(), t.to_string()]);
                    }
                    if !extra.is_empty() {
                        args.push("--".into());
                        args.extend(extra);
                    }
                    runs.push(runner::exec(&runner::command("cmake", &args))?);
                }
            }
            _ => {
                return Err(Error::InvalidInput(format!(
                    "make runner: mode `{mode}` is not one of make, cmake"
                )));
            }
        }
        let stdout: String = runs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .collect();
        let stderr: String = runs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        let root = project_root(
            &stdout,
            runner::setting(&request, "build_dir").unwrap_or("build"),
        );
        let mut diags = parse(&stderr, &root);
        diags.extend(parse(&stdout, &root));
        let last = runs.last().expect("one run at least");
        let exit_code = last.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !last.timed_out,
            exit_code,
            stdout,
            stderr,
            duration_ms: runs.iter().map(|o| o.duration_ms).sum(),
            diagnostics: diags,
            truncated: runs.iter().any(|o| o.truncated),
            timed_out: last.timed_out,
        })
    }
}

kiln_guest::export_runner!(Make);

/// The project's directory as the build sees it: make's first `Entering directory '…'`, or
/// the directory holding cmake's build directory.
fn project_root(stdout: &str, build_dir: &str) -> String {
    for l in stdout.lines() {
        if let Some(d) = l.split("Build files have been written to: ").nth(1) {
            let d = d.trim();
            return d
                .strip_suffix(&format!("/{}", build_dir.trim_end_matches('/')))
                .unwrap_or(d)
                .to_string();
        }
        if let Some(d) = l.split("Entering directory '").nth(1) {
            return d.trim_end_matches('\'').to_string();
        }
    }
    String::new()
}

fn relative(path: &str, root: &str) -> String {
    if root.is_empty() {
        return path.to_string();
    }
    path.strip_prefix(root.trim_end_matches('/'))
        .and_then(|p| p.strip_prefix('/'))
        .unwrap_or(path)
        .to_string()
}

fn parse(output: &str, root: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut lines = output.lines().peekable();
    while let Some(l) = lines.next() {
        // `CMake Error at CMakeLists.txt:3 (add_executable):` then the indented message.
        if let Some(rest) = l
            .strip_prefix("CMake Error at ")
            .or_else(|| l.strip_prefix("CMake Warning at "))
        {
            let warning = l.starts_with("CMake Warning");
            let loc = rest.split(' ').next().unwrap_or("");
            let (file, n) = loc.rsplit_once(':').unwrap_or((loc, "0"));
            let mut msg = Vec::new();
            while let Some(next) = lines.peek() {
                if !(next.starts_with(' ') || next.is_empty()) {
                    break;
                }
                let t = lines.next().unwrap().trim();
                if !t.is_empty() {
                    msg.push(t.to_string());
                }
            }
            out.push(Diagnostic {
                file: relative(file, root),
                line: n.trim_end_matches(':').parse().unwrap_or(0),
                column: 0,
                severity: if warning {
                    Severity::Warning
                } else {
                    Severity::Error
                },
                code: None,
                message: msg.join(" "),
            });
            continue;
        }
        if let Some(d) = diagnostics::parse_line(l) {
            let mut w = runner::to_wit_diagnostics(vec![d]);
            let mut d = w.remove(0);
            d.file = relative(&d.file, root);
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiler_and_cmake_messages_relative_to_the_project() {
        let out = "-- Configuring done\n-- Build files have been written to: /w/build\n";
        let root = project_root(out, "build");
        assert_eq!(root, "/w");
        let err = "/w/src/main.c: In function 'main':\n/w/src/main.c:5:5: error: expected ';' before 'printf'\nCMake Error at CMakeLists.txt:3 (add_executable):\n  Cannot find source file:\n\n    nope.c\n\n-- Configuring incomplete\n";
        let d = parse(err, &root);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].column),
            ("src/main.c", 5, 5)
        );
        assert_eq!((d[1].file.as_str(), d[1].line), ("CMakeLists.txt", 3));
        assert_eq!(d[1].message, "Cannot find source file: nope.c");
        assert_eq!(
            project_root("make: Entering directory '/w/x'\n", "build"),
            "/w/x"
        );
    }
}
