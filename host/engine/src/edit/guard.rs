//! The check guard: in a fix loop the model may not change what decides its success. An edit
//! to a file that defines the check (a runner's configuration, such as the `Makefile` or
//! `package.json`: the loop's caller names them) is refused, and so is one that deletes the
//! file holding a test the last check saw fail, or removes that test's name from it. What
//! the guard cannot judge (a test file changed in other ways) is reported: [`is_test_path`].

use crate::path::Glob;
use std::path::Path;

/// What a fix loop's model may not change (empty: nothing is guarded).
#[derive(Debug, Clone, Default)]
pub struct CheckGuard {
    /// Files that define the check, each with what reads it: a glob matched against the
    /// file's name at any depth (`Makefile`, `jest.config.*`) or, when it holds a `/`,
    /// against the path's last components (`.cargo/config.toml`).
    files: Vec<(Glob, String)>,
    /// Workspace-relative paths that define the check (a script the command runs).
    paths: Vec<(String, String)>,
    /// Paths the user named as the loop's own files: never refused as check files.
    allowed: Vec<String>,
    /// The tests the last check saw fail: (workspace-relative file, test name).
    failing: Vec<(String, String)>,
}

impl CheckGuard {
    /// A guard refusing nothing yet; `allowed`: the files the user named (its targets).
    pub fn new(allowed: &[String]) -> CheckGuard {
        CheckGuard {
            allowed: allowed.iter().map(|p| norm(p)).collect(),
            ..Default::default()
        }
    }

    /// Guard the files matching `pattern` (see [`CheckGuard::files`]), which `what` reads.
    pub fn file_pattern(&mut self, pattern: &str, what: &str) {
        self.files.push((Glob::new(pattern), what.to_string()));
    }

    /// Guard the one workspace file `rel`, which `what` is.
    pub fn path(&mut self, rel: &str, what: &str) {
        self.paths.push((norm(rel), what.to_string()));
    }

    /// The tests the check now fails: (file as the diagnostic names it, test name). A file
    /// outside the workspace is left out.
    pub fn set_failing(&mut self, root: &Path, tests: impl IntoIterator<Item = (String, String)>) {
        self.failing = tests
            .into_iter()
            .filter_map(|(file, name)| {
                let f = file.trim();
                let rel = match Path::new(f).strip_prefix(root) {
                    Ok(rel) => rel.to_string_lossy().into_owned(),
                    Err(_) if Path::new(f).is_absolute() => return None,
                    Err(_) => f.to_string(),
                };
                let rel = norm(&rel);
                (!rel.is_empty()).then_some((rel, name))
            })
            .collect();
    }

    /// Nothing is guarded.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.paths.is_empty() && self.failing.is_empty()
    }

    /// Why the model may not create, change, delete or move `rel`: it defines the check.
    pub fn refuse_path(&self, rel: &str) -> Option<String> {
        let rel = norm(rel);
        if self.allowed.contains(&rel) {
            return None;
        }
        let what = self
            .paths
            .iter()
            .find(|(p, _)| *p == rel)
            .map(|(_, w)| w)
            .or_else(|| {
                self.files
                    .iter()
                    .find(|(g, _)| matches_file(g, &rel))
                    .map(|(_, w)| w)
            })?;
        Some(format!(
            "{rel} is not yours to change: it defines the check ({what}), and the model may not change what decides success. Nothing of this answer was applied: fix the code instead, and send the answer again without this file. If the fix really needs it changed, call `loop_stop` saying what change is needed (a person can allow it with `kiln fix --allow-check-edits`)"
        ))
    }

    /// Why the change of `rel` from `old` to `new` (`None`: deleted or moved away) is
    /// refused: it deletes the file holding a failing test, or removes the test's name from it.
    pub fn refuse_change(&self, rel: &str, old: Option<&str>, new: Option<&str>) -> Option<String> {
        let rel = norm(rel);
        let old = old?;
        for (file, name) in self.failing.iter().filter(|(f, _)| *f == rel) {
            let Some(new) = new else {
                return Some(format!(
                    "{rel} holds the failing test `{name}`: deleting it (or moving it away) would make the check pass without fixing anything, and the model may not change what decides success. Nothing of this answer was applied: fix the code the test exercises instead"
                ));
            };
            let key = test_key(name);
            if !key.is_empty() && mentions(old, &key) && !mentions(new, &key) {
                return Some(format!(
                    "{file}: the edit removes the failing test `{name}` (`{key}` no longer appears in it): the model may not change what decides success. Nothing of this answer was applied: fix the code the test exercises instead"
                ));
            }
            if let Some(marker) = skip_markers(&rel)
                .iter()
                .find(|m| new.matches(**m).count() > old.matches(**m).count())
            {
                return Some(format!(
                    "{file}: the edit adds `{marker}` to the file of the failing test `{name}`, which would keep the test from running: the model may not change what decides success. Nothing of this answer was applied: fix the code the test exercises instead"
                ));
            }
        }
        None
    }

    /// `rel` is a file of tests: it holds a test the check saw fail, or its name or
    /// directory says it holds tests ([`is_test_path`]).
    pub fn is_tests(&self, rel: &str) -> bool {
        let rel = norm(rel);
        self.failing.iter().any(|(f, _)| *f == rel) || is_test_path(&rel)
    }

    /// `rel` decides success: a file of tests ([`CheckGuard::is_tests`]) or one that defines
    /// the check, named by the user or not.
    pub fn decides_success(&self, rel: &str) -> bool {
        let n = norm(rel);
        self.is_tests(&n)
            || self.paths.iter().any(|(p, _)| *p == n)
            || self.files.iter().any(|(g, _)| matches_file(g, &n))
    }
}

/// What keeps a test from running (or runs only some) in a file of `rel`'s language, in the
/// test frameworks kiln's runners drive: added to the file of a failing test, it is refused.
/// By language, so a Rust fix calling `iter().skip(1)` is not a JavaScript `test.skip(`.
fn skip_markers(rel: &str) -> &'static [&'static str] {
    let ext = rel.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "py" => &["mark.skip", "mark.xfail", "pytest.skip(", "unittest.skip"],
        "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "mts" | "cts" => {
            &[".skip(", ".only(", ".todo(", "xit(", "xtest(", "xdescribe("]
        }
        "go" => &["t.Skip"],
        "rs" => &["#[ignore"],
        _ => &[],
    }
}

/// A workspace-relative path in one form (`./a//b` is `a/b`).
fn norm(rel: &str) -> String {
    crate::path::normalize(rel).to_string_lossy().into_owned()
}

/// Does `g` match `rel`: its name, or for a pattern with a `/`, its last components?
fn matches_file(g: &Glob, rel: &str) -> bool {
    let pattern = g.as_str();
    if !pattern.contains('/') {
        return rel.rsplit('/').next().is_some_and(|name| g.matches(name));
    }
    let depth = pattern.split('/').count();
    let parts: Vec<&str> = rel.split('/').collect();
    parts.len() >= depth && g.matches(&parts[parts.len() - depth..].join("/"))
}

/// The part of a failing test's name its file spells: pytest's `tests.test_x::test_add[1-2]`
/// is `test_add`, cargo's `tests::adds` is `adds`, jest's `calc > adds` is `adds`, go's
/// `TestAdd/case` is `TestAdd`.
fn test_key(name: &str) -> String {
    let mut key = name.trim();
    if let Some(last) = key.rsplit(" > ").next() {
        key = last;
    }
    if key.contains("::") {
        key = key.rsplit("::").next().unwrap_or(key);
    }
    if let Some(at) = key.find('[') {
        key = &key[..at];
    }
    if !key.contains(' ')
        && let Some((first, _)) = key.split_once('/')
    {
        key = first;
    }
    key.trim().to_string()
}

/// Does `text` name `key`: as a whole word for an identifier (so `_test_add` and
/// `test_add_old` are not `test_add`), as a substring for a title with spaces or punctuation.
fn mentions(text: &str, key: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    if !key.chars().all(ident) {
        return text.contains(key);
    }
    text.match_indices(key).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + key.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// Does the path say it holds tests: `test_*.py`, `*_test.py`, `*_test.go`, `*.test.*`,
/// `*.spec.*`, `conftest.py`, or a file under `tests/`, `test/` or `__tests__/`?
pub fn is_test_path(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((name, dirs)) = parts.split_last() else {
        return false;
    };
    if dirs
        .iter()
        .any(|d| matches!(*d, "tests" | "test" | "__tests__"))
    {
        return true;
    }
    let stem = name.split('.').next().unwrap_or(name);
    name.starts_with("test_")
        || stem.ends_with("_test")
        || name.contains(".test.")
        || name.contains(".spec.")
        || *name == "conftest.py"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> CheckGuard {
        let mut g = CheckGuard::new(&["sub/Makefile".to_string()]);
        g.file_pattern("Makefile", "make reads it");
        g.file_pattern("jest.config.*", "jest reads it");
        g.file_pattern(".cargo/config.toml", "cargo reads it");
        g.path("scripts/check.sh", "the script the check runs");
        g
    }

    #[test]
    fn check_files_are_refused_at_any_depth_unless_named() {
        let g = guard();
        for p in [
            "Makefile",
            "./Makefile",
            "lib/Makefile",
            "jest.config.js",
            "web/jest.config.ts",
            ".cargo/config.toml",
            "crates/a/.cargo/config.toml",
            "scripts/check.sh",
        ] {
            let why = g.refuse_path(p).unwrap_or_else(|| panic!("{p} allowed"));
            assert!(why.contains("it defines the check"), "{why}");
        }
        for p in [
            "sub/Makefile",
            "Makefile.txt",
            "src/main.c",
            "config.toml",
            "check.sh",
        ] {
            assert_eq!(g.refuse_path(p), None, "{p}");
        }
    }

    #[test]
    fn removing_or_deleting_a_failing_test_is_refused_other_edits_are_not() {
        let mut g = CheckGuard::default();
        let root = Path::new("/ws");
        g.set_failing(
            root,
            [
                (
                    "/ws/tests/test_x.py".into(),
                    "tests.test_x::test_add".into(),
                ),
                ("calc.test.js".into(), "calc > adds".into()),
                ("/elsewhere/x.py".into(), "test_far".into()),
            ],
        );
        let old = "def test_add():\n    assert add(1, 2) == 3\n";
        assert!(
            g.refuse_change("tests/test_x.py", Some(old), None)
                .is_some()
        );
        let gone = "def _test_add():\n    assert add(1, 2) == 3\n";
        assert!(
            g.refuse_change("tests/test_x.py", Some(old), Some(gone))
                .is_some_and(|w| w.contains("removes the failing test"))
        );
        let skipped = "@pytest.mark.skip\ndef test_add():\n    assert add(1, 2) == 3\n";
        assert!(
            g.refuse_change("tests/test_x.py", Some(old), Some(skipped))
                .is_some_and(|w| w.contains("adds `mark.skip`"))
        );
        // A marker already there is no change.
        assert_eq!(
            g.refuse_change("tests/test_x.py", Some(skipped), Some(skipped)),
            None
        );
        let only = "test.only(\"other\", () => {});\ntest(\"adds\", () => {});\n";
        assert!(
            g.refuse_change(
                "calc.test.js",
                Some("test(\"adds\", () => {});\n"),
                Some(only)
            )
            .is_some()
        );
        let fixed = "def test_add():\n    assert add(1, 2) == 3  # fine\n";
        assert_eq!(
            g.refuse_change("tests/test_x.py", Some(old), Some(fixed)),
            None
        );
        // A file the failing tests are not in, and a new file, are not judged.
        assert_eq!(g.refuse_change("calc.py", Some(old), None), None);
        assert_eq!(g.refuse_change("tests/test_x.py", None, Some("")), None);
        // jest's title.
        let js = "test(\"adds\", () => {});\n";
        assert!(
            g.refuse_change("calc.test.js", Some(js), Some(""))
                .is_some()
        );
        assert!(g.is_tests("tests/test_x.py") && g.is_tests("calc.test.js"));
        assert_eq!(g.refuse_path("x"), None);
        // In another language the same text is code.
        g.set_failing(root, [("src/lib.rs".into(), "tests::adds".into())]);
        let rs = "fn adds() {}\n";
        let fixed_rs = "fn adds() { v.iter().skip(1); }\n";
        assert_eq!(
            g.refuse_change("src/lib.rs", Some(rs), Some(fixed_rs)),
            None
        );
        let ignored = "#[ignore]\nfn adds() {}\n";
        assert!(
            g.refuse_change("src/lib.rs", Some(rs), Some(ignored))
                .is_some()
        );
    }

    #[test]
    fn test_names_and_paths() {
        assert_eq!(test_key("tests.test_calc::test_add[1-2]"), "test_add");
        assert_eq!(test_key("test/calc.test.js > calc > adds"), "adds");
        assert_eq!(test_key("TestAdd/negative"), "TestAdd");
        assert_eq!(test_key("tests::it_works"), "it_works");
        assert!(mentions("fn it_works() {}", "it_works"));
        assert!(!mentions("fn it_works_not() {}", "it_works"));
        for p in [
            "test_x.py",
            "x_test.py",
            "a/x_test.go",
            "src/x.test.ts",
            "x.spec.js",
            "tests/helpers.py",
            "pkg/__tests__/a.js",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in ["calc.py", "src/testing.rs", "latest.py", "contest.py"] {
            assert!(!is_test_path(p), "{p}");
        }
    }
}
