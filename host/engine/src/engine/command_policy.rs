//! The host's own check of a `run_cmd` call against a loop's command allowlist, made before
//! the plugin's grant is checked again by the sandbox. It depends on nothing else in the
//! engine, so both the tool dispatcher and the execute/review loop can use it.
//!
//! The program must be listed, and arguments that would make a listed program run another
//! one or write are refused (`env` with any argument, `find -exec`/`-delete`/`-fprint`,
//! `rg --pre`/`-z`). The review phase's inspection programs ([`REVIEW_COMMANDS`], granted by
//! kiln itself, not by the user) are also kept inside the workspace: Landlock lets a program
//! read anywhere, so `head ~/.ssh/id_ed25519`, `grep -r . /home` or `head link-out.txt` would
//! put files outside it in the model's context and the store. Absolute paths, `..`,
//! arguments naming a path that resolves outside, and the flags that follow links while
//! walking are refused.

use serde_json::Value;
use std::path::Path;

/// Programs the review phase's `run_cmd` may run, with the arguments that could run another
/// program, write, or read outside the workspace refused.
pub const REVIEW_COMMANDS: [&str; 10] = [
    "ls", "stat", "pwd", "find", "grep", "head", "tail", "which", "env", "rg",
];

/// Why the host refused a `run_cmd` call (nothing was run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandRefusal {
    /// The program is not on the loop's allowlist.
    #[error(
        "refused: `{program}` is not allowed here; run_cmd may run only: {}. Nothing was run.",
        allowed_list(.allowed)
    )]
    NotAllowed {
        /// The program the call named.
        program: String,
        /// The loop's allowlist.
        allowed: Vec<String>,
    },
    /// An argument would make the program run another one or write.
    #[error(
        "refused: `{program} {arg}` could run another program or write; it is not allowed here. Nothing was run."
    )]
    RunsOrWrites {
        /// The program the call named.
        program: String,
        /// The offending argument.
        arg: String,
    },
    /// An argument of an inspection program could make it read outside the workspace.
    #[error(
        "refused: `{program} {arg}` could read outside the workspace; `{program}` may only look at paths inside it (relative, no `..`, no link leading out). Nothing was run."
    )]
    ReadsOutside {
        /// The program the call named.
        program: String,
        /// The offending argument.
        arg: String,
    },
    /// An argument of an inspection program names git's own files (by its real path).
    #[error(
        "refused: `{program} {arg}` would read git's own files (`.git`, which can hold credentials); they are not shown to the model. Nothing was run."
    )]
    ReadsGit {
        /// The program the call named.
        program: String,
        /// The offending argument.
        arg: String,
    },
    /// A recursive search where the kernel gives programs no view of their own, so `.git`
    /// cannot be hidden from it.
    #[error(
        "refused: `{program} {arg}` searches directories recursively, and on this system kiln cannot hide `.git` (git's own files, which can hold credentials) from the programs it runs; name files, or use the search and glob tools. Nothing was run."
    )]
    RecursesWithoutView {
        /// The program the call named.
        program: String,
        /// The offending argument (the program itself when it always recurses).
        arg: String,
    },
}

fn allowed_list(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "(nothing)".to_string()
    } else {
        allowed.join(", ")
    }
}

/// The program and its arguments of a `run_cmd` call: the words of `command`, then `args`.
pub fn command_words(arguments: &Value) -> Vec<String> {
    let command = arguments["command"].as_str().unwrap_or("").trim();
    let mut words: Vec<String> = command.split_whitespace().map(String::from).collect();
    if let Some(args) = arguments["args"].as_array() {
        words.extend(args.iter().map(|a| a.as_str().unwrap_or("").to_string()));
    }
    words
}

/// Check a call's words (program first) against `allow`; `workspace` is where the inspection
/// programs must stay.
pub fn check(allow: &[String], words: &[String], workspace: &Path) -> Result<(), CommandRefusal> {
    let view = crate::plugin::confine::reap::view_missing().is_none();
    check_in(allow, words, workspace, view)
}

/// [`check`], where `view` says whether the kernel gives programs a view of their own.
fn check_in(
    allow: &[String],
    words: &[String],
    workspace: &Path,
    view: bool,
) -> Result<(), CommandRefusal> {
    let program = words.first().map(String::as_str).unwrap_or("");
    if !allow.iter().any(|a| a == program) {
        return Err(CommandRefusal::NotAllowed {
            program: program.to_string(),
            allowed: allow.to_vec(),
        });
    }
    let args = words.get(1..).unwrap_or_default();
    if let Some(arg) = runs_or_writes(program, args) {
        return Err(CommandRefusal::RunsOrWrites {
            program: program.to_string(),
            arg,
        });
    }
    if !REVIEW_COMMANDS.contains(&program) {
        return Ok(());
    }
    if let Some(arg) = outside_argument(workspace, program, args) {
        return Err(CommandRefusal::ReadsOutside {
            program: program.to_string(),
            arg,
        });
    }
    if let Some(arg) = git_argument(workspace, args) {
        return Err(CommandRefusal::ReadsGit {
            program: program.to_string(),
            arg,
        });
    }
    // With a view, the sandbox hides every `.git` from a program that writes nowhere (the
    // review's); without one, a recursion could reach it.
    if !view && let Some(arg) = recursion(program, args) {
        return Err(CommandRefusal::RecursesWithoutView {
            program: program.to_string(),
            arg,
        });
    }
    Ok(())
}

/// The first path argument (or `--opt=PATH` value) that lies in a `.git` directory by name or
/// by its real path (links followed, as the program will).
fn git_argument(workspace: &Path, args: &[String]) -> Option<String> {
    let root = workspace.canonicalize().ok()?;
    let in_git = |rel: &str| {
        if crate::path::in_git_dir(rel) {
            return true;
        }
        workspace.join(rel).canonicalize().is_ok_and(|real| {
            real.strip_prefix(&root)
                .is_ok_and(|below| crate::path::in_git_dir(&below.to_string_lossy()))
        })
    };
    args.iter()
        .find(|a| match a.strip_prefix("--") {
            Some(opt) => opt.split_once('=').is_some_and(|(_, val)| in_git(val)),
            None => !a.starts_with('-') && !a.is_empty() && in_git(a),
        })
        .cloned()
}

/// What makes an inspection program walk directories: `find` and `rg` always do, `grep`
/// with `-r`/`--recursive`/`-d recurse`, `ls` with `-R`/`--recursive`.
fn recursion(program: &str, args: &[String]) -> Option<String> {
    let short_with = |a: &str, c: char| a.starts_with('-') && !a.starts_with("--") && a.contains(c);
    match program {
        "find" | "rg" => Some(args.join(" ")),
        "grep" => args
            .iter()
            .enumerate()
            .find(|(i, a)| {
                short_with(a, 'r')
                    || short_with(a, 'R')
                    || a.as_str() == "--recursive"
                    || a.as_str() == "--directories=recurse"
                    || a.as_str() == "-drecurse"
                    || (a.as_str() == "-d" && args.get(i + 1).is_some_and(|v| v == "recurse"))
            })
            .map(|(_, a)| a.clone()),
        "ls" => args
            .iter()
            .find(|a| short_with(a, 'R') || a.as_str() == "--recursive")
            .cloned(),
        _ => None,
    }
}

/// The first argument that would make `program` run another program or write, if any.
fn runs_or_writes(program: &str, args: &[String]) -> Option<String> {
    match program {
        // `env` may only print the environment: any argument could run a program
        // (`env CMD`, `env -S"CMD"`, `env --split-string=CMD`).
        "env" => args.first().cloned(),
        "find" => args
            .iter()
            .find(|a| {
                matches!(
                    a.as_str(),
                    "-exec"
                        | "-execdir"
                        | "-ok"
                        | "-okdir"
                        | "-delete"
                        | "-fprint"
                        | "-fprint0"
                        | "-fprintf"
                        | "-fls"
                )
            })
            .cloned(),
        // `--pre` runs a preprocessor, `-z`/`--search-zip` runs decompressors.
        "rg" => args
            .iter()
            .find(|a| {
                a.starts_with("--pre")
                    || a.starts_with("--hostname-bin")
                    || a.starts_with("--search-zip")
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('z'))
            })
            .cloned(),
        _ => None,
    }
}

/// A flag that makes `program` follow symbolic links while it walks.
fn follows_links(program: &str, a: &str) -> bool {
    let short_with = |c: char| a.starts_with('-') && !a.starts_with("--") && a.contains(c);
    match program {
        "find" => matches!(a, "-L" | "-follow"),
        "grep" => a == "--dereference-recursive" || short_with('R'),
        "rg" => a == "--follow" || short_with('L'),
        "ls" | "stat" => a == "--dereference" || short_with('L'),
        _ => false,
    }
}

/// The first argument of an inspection program that could make it read outside the
/// workspace, if any.
fn outside_argument(workspace: &Path, program: &str, args: &[String]) -> Option<String> {
    let root = workspace.canonicalize().ok()?;
    let leaves = |rel: &str| -> bool {
        if rel.is_empty() {
            return false;
        }
        if crate::path::check_relative(rel).is_err() {
            return true;
        }
        // An existing path must resolve (links followed, as the program will) inside.
        match workspace.join(rel).canonicalize() {
            Ok(real) => !real.starts_with(&root),
            Err(_) => false,
        }
    };
    args.iter()
        .find(|a| {
            if follows_links(program, a) {
                return true;
            }
            if let Some(opt) = a.strip_prefix("--") {
                // `--file=PATH`: the value is a path like any other.
                opt.split_once('=').is_some_and(|(_, val)| leaves(val))
            } else if a.starts_with('-') && a.len() > 1 {
                // A short option with a value attached (`-f/etc/passwd`) may not name a path.
                a.contains('/')
            } else {
                leaves(a)
            }
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review() -> Vec<String> {
        REVIEW_COMMANDS.map(String::from).to_vec()
    }

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// A workspace with a file, a directory and a link leading out of it.
    fn workspace() -> (tempfile::TempDir, tempfile::TempDir) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
        std::fs::create_dir(ws.path().join("src")).unwrap();
        std::fs::write(outside.path().join("secret"), "s\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), ws.path().join("out.txt"))
            .unwrap();
        (ws, outside)
    }

    fn verdict(line: &str) -> Result<(), CommandRefusal> {
        let (ws, _outside) = workspace();
        check_in(&review(), &words(line), ws.path(), true)
    }

    #[test]
    fn inspection_inside_the_workspace_passes() {
        for line in [
            "ls -la src",
            "stat a.txt",
            "pwd",
            "find . -name *.rs -type f",
            "grep -rn needle src",
            "grep --include=*.rs -r x .",
            "head -n 5 a.txt",
            "tail -5 a.txt",
            "which cargo",
            "env",
            "rg -n needle src",
            "ls missing-yet.txt",
        ] {
            assert_eq!(verdict(line), Ok(()), "{line}");
        }
    }

    #[test]
    fn programs_off_the_list_are_refused() {
        for line in ["cat a.txt", "sh -c ls", "", "python3 x.py", "/bin/ls"] {
            assert!(
                matches!(verdict(line), Err(CommandRefusal::NotAllowed { .. })),
                "{line}"
            );
        }
        let (ws, _o) = workspace();
        let e = check(&[], &words("ls"), ws.path()).unwrap_err();
        assert!(e.to_string().contains("(nothing)"), "{e}");
    }

    #[test]
    fn arguments_that_run_or_write_are_refused() {
        for line in [
            "env ls",
            "env -S ls",
            "env --split-string=ls",
            "find . -exec cat {} ;",
            "find . -execdir sh ;",
            "find . -ok rm {} ;",
            "find . -delete",
            "find . -fprint list.txt",
            "find . -fprintf list.txt %p",
            "find . -fls list.txt",
            "rg --pre cat x",
            "rg --pre=cat x",
            "rg -z x",
            "rg -nz x",
            "rg --search-zip x",
            "rg --hostname-bin=sh x",
        ] {
            assert!(
                matches!(verdict(line), Err(CommandRefusal::RunsOrWrites { .. })),
                "{line}: {:?}",
                verdict(line)
            );
        }
    }

    #[test]
    fn reading_outside_the_workspace_is_refused() {
        for line in [
            "head /etc/passwd",
            "head ../x",
            "grep -r root /etc",
            "grep -R x .",
            "grep -rR x .",
            "grep --dereference-recursive x .",
            "grep -f/etc/passwd a.txt",
            "grep --file=/etc/passwd a.txt",
            "grep --exclude-from=../list x .",
            "find -L .",
            "find . -follow",
            "rg --follow x",
            "rg -L x",
            "ls -L out.txt",
            "ls --dereference src",
            "stat -L a.txt",
            "head out.txt",
            "tail src/../../x",
        ] {
            assert!(
                matches!(verdict(line), Err(CommandRefusal::ReadsOutside { .. })),
                "{line}: {:?}",
                verdict(line)
            );
        }
    }

    #[test]
    fn git_s_files_are_refused_by_name_and_by_real_path() {
        let (ws, _o) = workspace();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        std::fs::write(ws.path().join(".git/config"), "[x]\n").unwrap();
        std::os::unix::fs::symlink(".git", ws.path().join("docs")).unwrap();
        for line in [
            "head .git/config",
            "head ./.git/config",
            "grep -r token .git",
            "head docs/config",
            "ls docs",
            "grep --file=.git/config a.txt",
        ] {
            let v = check_in(&review(), &words(line), ws.path(), true);
            assert!(
                matches!(v, Err(CommandRefusal::ReadsGit { .. })),
                "{line}: {v:?}"
            );
        }
        assert_eq!(
            check_in(&review(), &words("head a.txt"), ws.path(), true),
            Ok(())
        );
        assert_eq!(
            check_in(&review(), &words("ls .gitignore"), ws.path(), true),
            Ok(())
        );
    }

    #[test]
    fn without_a_view_recursion_is_refused() {
        let (ws, _o) = workspace();
        for line in ["grep -rn x .", "find .", "rg x", "ls -R"] {
            let v = check_in(&review(), &words(line), ws.path(), false);
            assert!(
                matches!(v, Err(CommandRefusal::RecursesWithoutView { .. })),
                "{line}: {v:?}"
            );
        }
        assert_eq!(
            check_in(&review(), &words("head a.txt"), ws.path(), false),
            Ok(())
        );
    }

    #[test]
    fn what_recurses_is_known() {
        let w = |l: &str| words(l)[1..].to_vec();
        assert!(recursion("find", &w("find .")).is_some());
        assert!(recursion("rg", &w("rg x")).is_some());
        for l in [
            "grep -r x",
            "grep -rn x .",
            "grep --recursive x",
            "grep -d recurse x .",
        ] {
            assert!(recursion("grep", &w(l)).is_some(), "{l}");
        }
        assert!(recursion("ls", &w("ls -laR")).is_some());
        assert!(recursion("grep", &w("grep -n x a.txt")).is_none());
        assert!(recursion("ls", &w("ls -la src")).is_none());
        assert!(recursion("head", &w("head a.txt")).is_none());
    }

    #[test]
    fn programs_granted_by_the_user_are_not_confined_to_the_workspace() {
        let (ws, _o) = workspace();
        let allow = vec!["cargo".to_string(), "ls".to_string()];
        assert_eq!(check(&allow, &words("cargo test /tmp"), ws.path()), Ok(()));
        assert!(check(&allow, &words("ls /etc"), ws.path()).is_err());
    }

    #[test]
    fn words_come_from_the_command_and_its_args() {
        let v = serde_json::json!({"command": " grep -r ", "args": ["x", "src"]});
        assert_eq!(command_words(&v), ["grep", "-r", "x", "src"]);
        assert!(command_words(&serde_json::json!({})).is_empty());
    }
}
