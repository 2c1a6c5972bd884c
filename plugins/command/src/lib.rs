//! The `command` runner: runs the command configured in the `cmd` setting (from `--cmd` or
//! `[plugins.command.settings]`) through the host's `exec` import and parses
//! `file:line:col: severity: message` diagnostics from its output.
//!
//! `{file}` in the command is replaced by the first target and `{files}` by every target (one
//! argument each). The command is split like a shell would split words (quotes respected) but
//! no shell runs it.

use kiln_guest::diagnostics;
use kiln_guest::runner::{self, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo};

struct Command;

impl Runner for Command {
    fn manifest() -> Manifest {
        // Asks for any program: what actually runs is what the user grants (`--cmd` grants
        // exactly the command it names).
        runner::manifest(
            "command",
            env!("CARGO_PKG_VERSION"),
            "Run a configured command and parse file:line:col diagnostics",
        )
        .with_exec("*", &["*"])
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "command".into(),
            description: "Run a configured command (gcc, python, node, make, ...) and parse file:line:col diagnostics".into(),
            languages: vec![],
            patterns: vec![],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let cmd = runner::setting(&request, "cmd").ok_or_else(|| {
            Error::InvalidInput(
                "the command runner needs a command: pass --cmd \"...\" or set `cmd` under [plugins.command.settings] in kiln.toml".into(),
            )
        })?;
        let words = split_words(cmd).map_err(Error::InvalidInput)?;
        let argv = expand_targets(words, &request.targets);
        let Some((program, args)) = argv.split_first() else {
            return Err(Error::InvalidInput("the `cmd` setting is empty".into()));
        };
        let out = runner::exec(&runner::command(program, args))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut diags = diagnostics::parse(&stderr);
        diags.extend(diagnostics::parse(&stdout));
        let exit_code = out.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !out.timed_out,
            exit_code,
            stdout,
            stderr,
            duration_ms: out.duration_ms,
            diagnostics: runner::to_wit_diagnostics(diags),
            truncated: out.truncated,
            timed_out: out.timed_out,
        })
    }
}

kiln_guest::export_runner!(Command);

/// Split a command line into words: whitespace separates, single quotes keep everything,
/// double quotes keep everything but `\"` and `\\`, a backslash outside quotes escapes.
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(format!("unclosed single quote in command `{s}`")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err(format!("unclosed double quote in command `{s}`")),
                        },
                        Some(c) => cur.push(c),
                        None => return Err(format!("unclosed double quote in command `{s}`")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    cur.push(c);
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

fn expand_targets(words: Vec<String>, targets: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len() + targets.len());
    for w in words {
        if w == "{files}" {
            out.extend(targets.iter().cloned());
        } else if w.contains("{file}") {
            out.push(w.replace("{file}", targets.first().map(String::as_str).unwrap_or("")));
        } else {
            out.push(w);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_quotes_and_expands_targets() {
        let w = split_words(r#"gcc -Wall "-DNAME=a b" 'x y' {files}"#).unwrap();
        assert_eq!(w, ["gcc", "-Wall", "-DNAME=a b", "x y", "{files}"]);
        let argv = expand_targets(w, &["a.c".into(), "b.c".into()]);
        assert_eq!(argv[4..], ["a.c", "b.c"]);
        assert_eq!(
            expand_targets(vec!["python3".into(), "{file}".into()], &["m.py".into()]),
            ["python3", "m.py"]
        );
        assert!(split_words("echo 'open").is_err());
    }
}
