//! Which files define a runner's check: the one host-side list of them, per built-in runner
//! and per program a `--cmd` may run. A fix loop's model may not change them
//! ([`crate::edit::CheckGuard`]): a `Makefile` whose check target becomes `@true`, a
//! `package.json` whose `scripts.test` becomes `exit 0`, a new `conftest.py`, a
//! `.cargo/config.toml` setting `runner = "true"` would all make the check pass without
//! fixing anything.

use crate::edit::CheckGuard;
use std::collections::BTreeMap;
use std::path::Path;

/// A kind of check: the built-in runner that runs it, the programs that run it under the
/// `command` runner, and the files that decide what it runs (globs matched against a file's
/// name at any depth, or, with a `/`, against its last components).
struct CheckKind {
    runner: &'static str,
    programs: &'static [&'static str],
    files: &'static [&'static str],
}

/// Every kind of check kiln knows the files of.
const KINDS: &[CheckKind] = &[
    CheckKind {
        runner: "make",
        programs: &["make", "gmake", "cmake"],
        files: &[
            "Makefile",
            "makefile",
            "GNUmakefile",
            "*.mk",
            "CMakeLists.txt",
            "*.cmake",
        ],
    },
    CheckKind {
        runner: "node",
        programs: &[
            "npm", "npx", "node", "yarn", "pnpm", "jest", "vitest", "mocha",
        ],
        files: &[
            "package.json",
            "jest.config.*",
            "vitest.config.*",
            "vite.config.*",
            ".mocharc*",
        ],
    },
    CheckKind {
        runner: "pytest",
        programs: &["pytest", "py.test", "tox"],
        files: &[
            "pytest.ini",
            ".pytest.ini",
            "pyproject.toml",
            "setup.cfg",
            "tox.ini",
            "conftest.py",
        ],
    },
    CheckKind {
        runner: "cargo",
        programs: &["cargo"],
        files: &["Cargo.toml", ".cargo/config", ".cargo/config.toml"],
    },
    CheckKind {
        runner: "tsc",
        programs: &["tsc"],
        files: &["tsconfig*.json"],
    },
    CheckKind {
        runner: "go",
        programs: &["go"],
        files: &["go.mod", "go.work"],
    },
];

/// Shells whose first argument is a script.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh"];

/// The guard of a fix loop run by `runner` with `settings` in the workspace at `root`: the
/// runner's check files, those of every program its command (`cmd`) names, and a script of
/// the workspace the command runs (`./check.sh`, `sh ci/test.sh`, `make -f x.mk`'s files by
/// name). `allowed`: the files the user named, which stay the model's to change.
pub fn guard_for(
    runner: &str,
    settings: &BTreeMap<String, String>,
    root: &Path,
    allowed: &[String],
) -> CheckGuard {
    let mut guard = CheckGuard::new(allowed);
    let mut add = |k: &CheckKind, why: &str| {
        for f in k.files {
            guard.file_pattern(f, why);
        }
    };
    if let Some(k) = KINDS.iter().find(|k| k.runner == runner) {
        add(k, &format!("the `{runner}` runner reads it"));
    }
    let Some(cmd) = settings.get(crate::engine::defaults::RUNNER_CMD_SETTING) else {
        return guard;
    };
    let words = words(cmd);
    for w in &words {
        let name = w.rsplit('/').next().unwrap_or(w);
        if let Some(k) = KINDS.iter().find(|k| k.programs.contains(&name)) {
            add(k, &format!("the check runs `{name}`, which reads it"));
        }
    }
    for (i, w) in words.iter().enumerate() {
        let after_shell = i > 0
            && SHELLS.contains(&words[i - 1].rsplit('/').next().unwrap_or(""))
            && !w.starts_with('-');
        let script = i == 0 || after_shell || w.ends_with(".sh");
        let rel = w.trim_start_matches("./");
        if script
            && !rel.is_empty()
            && !w.contains('{')
            && crate::path::check_relative(rel).is_ok()
            && root.join(rel).is_file()
        {
            guard.path(rel, "the script the check runs");
        }
    }
    guard
}

/// The words of a command, split on whitespace, quotes and the shell's operators (enough to
/// find the programs and scripts it names; nothing is run from it).
fn words(cmd: &str) -> Vec<String> {
    cmd.split(|c: char| c.is_whitespace() || "'\"`;&|()<>$=".contains(c))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(g: &CheckGuard, p: &str) -> bool {
        g.refuse_path(p).is_some()
    }

    #[test]
    fn each_runner_guards_its_files() {
        let none = BTreeMap::new();
        let root = Path::new("/nonexistent");
        let g = guard_for("make", &none, root, &[]);
        assert!(refused(&g, "Makefile") && refused(&g, "lib/rules.mk"));
        assert!(!refused(&g, "main.c") && !refused(&g, "package.json"));
        let g = guard_for("node", &none, root, &[]);
        assert!(refused(&g, "package.json") && refused(&g, "jest.config.js"));
        let g = guard_for("pytest", &none, root, &[]);
        assert!(refused(&g, "tests/deep/conftest.py") && refused(&g, "pyproject.toml"));
        let g = guard_for("cargo", &none, root, &[]);
        assert!(refused(&g, "crates/x/Cargo.toml") && refused(&g, ".cargo/config.toml"));
        let g = guard_for("go", &none, root, &[]);
        assert!(refused(&g, "pkg/go.mod"));
        // A runner kiln does not know guards nothing by itself.
        assert!(guard_for("my-runner", &none, root, &[]).is_empty());
        // The files the user named stay the model's.
        let g = guard_for("make", &none, root, &["Makefile".into()]);
        assert!(!refused(&g, "Makefile") && refused(&g, "sub/Makefile"));
    }

    #[test]
    fn a_command_guards_the_files_of_the_programs_and_the_scripts_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ci")).unwrap();
        for f in ["check.sh", "ci/test.sh", "app.py", "run"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let cmd = |c: &str| {
            let mut s = BTreeMap::new();
            s.insert("cmd".to_string(), c.to_string());
            guard_for("command", &s, dir.path(), &[])
        };
        assert!(refused(&cmd("make test"), "Makefile"));
        assert!(refused(&cmd("python3 -m pytest -q"), "conftest.py"));
        assert!(refused(
            &cmd("sh -c 'cd web && npm test'"),
            "web/package.json"
        ));
        assert!(refused(&cmd("./check.sh"), "check.sh"));
        assert!(refused(&cmd("bash ci/test.sh --fast"), "ci/test.sh"));
        assert!(refused(&cmd("./run"), "run"));
        // The code a command checks is not its definition.
        let g = cmd("python3 app.py");
        assert!(!refused(&g, "app.py") && !refused(&g, "Makefile"));
        assert!(cmd("gcc -fsyntax-only {file}").is_empty());
    }
}
