//! Runner detection: with no `--runner`/`--cmd` and no `[fix] runner`/`cmd`, the runner is
//! picked from the project files at the workspace root, first match wins.

use std::path::Path;

/// A runner picked from the project, with the settings it gets and what to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Detected {
    /// The runner plugin's name.
    pub runner: &'static str,
    /// Settings passed to it (the cargo runner's `mode`).
    pub settings: Vec<(&'static str, &'static str)>,
    /// The command it runs, as a person would type it.
    pub command: &'static str,
    /// The project file that implied it.
    pub file: &'static str,
}

/// The runner the project at `workspace` implies, if any.
pub(crate) fn detect_runner(workspace: &Path) -> Option<Detected> {
    let has = |f: &str| workspace.join(f).is_file();
    let d = |runner, settings, command, file| {
        Some(Detected {
            runner,
            settings,
            command,
            file,
        })
    };
    if has("Cargo.toml") {
        return d("cargo", vec![("mode", "test")], "cargo test", "Cargo.toml");
    }
    for f in ["pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini"] {
        if has(f) {
            return d("pytest", vec![], "python3 -m pytest", f);
        }
    }
    if has("package.json") && package_has_test_script(&workspace.join("package.json")) {
        return d("node", vec![], "npm test", "package.json");
    }
    if has("tsconfig.json") {
        return d(
            "tsc",
            vec![],
            "tsc --noEmit --pretty false -p .",
            "tsconfig.json",
        );
    }
    if has("go.mod") {
        return d("go", vec![], "go test -json ./...", "go.mod");
    }
    if has("CMakeLists.txt") {
        return d(
            "make",
            vec![("mode", "cmake")],
            "cmake -S . -B build && cmake --build build",
            "CMakeLists.txt",
        );
    }
    for f in ["Makefile", "makefile", "GNUmakefile"] {
        if has(f) {
            return d("make", vec![], "make", f);
        }
    }
    None
}

/// True when `package.json` has a `scripts.test` that is not npm's placeholder.
fn package_has_test_script(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    v["scripts"]["test"]
        .as_str()
        .is_some_and(|t| !t.trim().is_empty() && !t.contains("no test specified"))
}

/// What is said when no runner is named and none is detected.
pub(crate) const NAME_A_RUNNER: &str = "no runner named: name a runner with --runner or --cmd (for example `--runner cargo --mode test` or `--cmd \"pytest -q\"`)";

/// [`NAME_A_RUNNER`], saying which root kiln looked at and, when the current directory lies
/// below it, the nearest directory on the way holding a project file (a monorepo's
/// sub-project: `py/pyproject.toml` under a git root), with the `-C` that picks it.
pub(crate) fn no_runner(workspace: &Path) -> String {
    let mut msg = format!(
        "{NAME_A_RUNNER}; no project file at the workspace root {}",
        workspace.display()
    );
    let Ok(cwd) = std::env::current_dir() else {
        return msg;
    };
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let Ok(below) = cwd.strip_prefix(&root) else {
        return msg;
    };
    let mut dir = below.to_path_buf();
    while !dir.as_os_str().is_empty() {
        if let Some(d) = detect_runner(&root.join(&dir)) {
            msg.push_str(&format!(
                " (it lies above {}, where {} implies `{}`: run kiln there with `kiln -C {} ...`)",
                dir.join(d.file).display(),
                d.file,
                d.command,
                crate::terminal::printable(&root.join(&dir).to_string_lossy())
            ));
            break;
        }
        dir.pop();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner_for(files: &[(&str, &str)]) -> Option<&'static str> {
        let dir = tempfile::tempdir().unwrap();
        for (f, text) in files {
            std::fs::write(dir.path().join(f), text).unwrap();
        }
        detect_runner(dir.path()).map(|d| d.runner)
    }

    #[test]
    fn project_files_pick_the_runner() {
        assert_eq!(runner_for(&[]), None);
        assert_eq!(runner_for(&[("Cargo.toml", "")]), Some("cargo"));
        assert_eq!(runner_for(&[("tox.ini", "")]), Some("pytest"));
        assert_eq!(runner_for(&[("setup.cfg", "")]), Some("pytest"));
        assert_eq!(runner_for(&[("go.mod", "")]), Some("go"));
        assert_eq!(
            runner_for(&[("package.json", r#"{"scripts":{"test":"node --test"}}"#)]),
            Some("node")
        );
        // npm init's placeholder is no test script: tsc when there is a tsconfig.json.
        assert_eq!(
            runner_for(&[
                (
                    "package.json",
                    r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#
                ),
                ("tsconfig.json", "{}")
            ]),
            Some("tsc")
        );
        assert_eq!(runner_for(&[("package.json", "{}")]), None);
        assert_eq!(runner_for(&[("CMakeLists.txt", "")]), Some("make"));
        assert_eq!(runner_for(&[("Makefile", "")]), Some("make"));
        assert_eq!(
            runner_for(&[("Makefile", ""), ("pyproject.toml", "")]),
            Some("pytest")
        );
    }
}
