//! The `tsc` runner: the TypeScript compiler as a type checker, `tsc --noEmit --pretty false
//! -p .` (the project's `tsconfig.json`), or over the target files when there is none. Its
//! `app.ts(4,30): error TS2551: message` lines become diagnostics (file, line, column, code);
//! a message's indented continuation lines are kept with it.
//!
//! The compiler is the project's own (`node_modules/.bin/tsc`) when it has one, else `tsc` on
//! `PATH`. Settings: `args` (extra arguments, split on whitespace).

use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};

struct Tsc;

const LOCAL: &str = "node_modules/.bin/tsc";

impl Runner for Tsc {
    fn manifest() -> Manifest {
        runner::manifest(
            "tsc",
            env!("CARGO_PKG_VERSION"),
            "TypeScript type check (tsc) with structured diagnostics",
        )
        .with_exec(LOCAL, &["*"])
        .with_exec("tsc", &["*"])
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "tsc".into(),
            description: "tsc --noEmit --pretty false; type errors as structured diagnostics"
                .into(),
            languages: vec!["typescript".into()],
            patterns: vec!["*.ts".into(), "*.tsx".into(), "tsconfig.json".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let mut base = vec!["--noEmit".to_string(), "--pretty".into(), "false".into()];
        if let Some(extra) = runner::setting(&request, "args") {
            base.extend(extra.split_whitespace().map(String::from));
        }
        let mut args = base.clone();
        args.extend(["-p".to_string(), ".".into()]);
        let mut out = tsc(&args)?;
        let no_project = |o: &runner::Output| {
            let s = String::from_utf8_lossy(&o.stdout);
            ["TS5057", "TS5081", "TS5058"].iter().any(|c| s.contains(c))
        };
        if no_project(&out) && !request.targets.is_empty() {
            let mut args = base;
            args.extend(request.targets.iter().cloned());
            out = tsc(&args)?;
        }
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut diagnostics = parse(&stdout);
        diagnostics.extend(parse(&stderr));
        let exit_code = out.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !out.timed_out,
            exit_code,
            stdout,
            stderr,
            duration_ms: out.duration_ms,
            diagnostics,
            truncated: out.truncated,
            timed_out: out.timed_out,
        })
    }
}

kiln_guest::export_runner!(Tsc);

/// The project's compiler, else the one on `PATH`.
fn tsc(args: &[String]) -> Result<runner::Output, Error> {
    match runner::exec(&runner::command(LOCAL, args)) {
        Err(Error::NotFound(_)) => runner::exec(&runner::command("tsc", args)),
        r => r,
    }
}

fn parse(output: &str) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    let mut last_was_diag = false;
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with(char::is_whitespace) && last_was_diag {
            if let Some(d) = out.last_mut() {
                d.message.push('\n');
                d.message.push_str(line.trim());
            }
            continue;
        }
        last_was_diag = false;
        if let Some(d) = parse_line(line) {
            out.push(d);
            last_was_diag = true;
        }
    }
    out
}

/// `file(line,col): error TS1234: message`, or `error TS5081: message` (no file).
fn parse_line(line: &str) -> Option<Diagnostic> {
    let (file, line_no, column, rest) = match line.find("): ") {
        Some(close) if line[..close].contains('(') => {
            let open = line[..close].rfind('(')?;
            let (l, c) = line[open + 1..close].split_once(',')?;
            (
                line[..open].to_string(),
                l.parse().ok()?,
                c.parse().ok()?,
                &line[close + 3..],
            )
        }
        _ => (String::new(), 0, 0, line),
    };
    let (sev, rest) = rest.split_once(' ')?;
    let severity = match sev {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        "message" | "suggestion" => Severity::Note,
        _ => return None,
    };
    let (code, message) = rest.split_once(": ")?;
    if !code.starts_with("TS") || !code[2..].chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(Diagnostic {
        file,
        line: line_no,
        column,
        severity,
        code: Some(code.to_string()),
        message: message.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_lines_and_continuations() {
        let out = "src/app.ts(2,24): error TS2551: Property 'lenght' does not exist on type 'string'. Did you mean 'length'?\napp.ts(4,3): error TS2322: Type '{ a: number; }' is not assignable to type 'B'.\n  Object literal may only specify known properties.\nerror TS5081: Cannot find a tsconfig.json file at the current directory: /w/tsconfig.json.\nFound 2 errors.\n";
        let d = parse(out);
        assert_eq!(d.len(), 3);
        assert_eq!(
            (
                d[0].file.as_str(),
                d[0].line,
                d[0].column,
                d[0].code.as_deref()
            ),
            ("src/app.ts", 2, 24, Some("TS2551"))
        );
        assert!(
            d[1].message
                .ends_with("\nObject literal may only specify known properties.")
        );
        assert_eq!(
            (d[2].file.as_str(), d[2].code.as_deref()),
            ("", Some("TS5081"))
        );
    }
}
