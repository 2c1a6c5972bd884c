//! Workspace-relative paths: the checks every path from a plugin, a model or a file name goes
//! through (relative, no `..`), glob matching, kiln's protected paths (`kiln.toml`, `.kiln/`,
//! `.git/` and `[sandbox] protect` globs) and the form of a file name passed as a program
//! argument. Functions over strings, plus one metadata check through the workspace's cap-std
//! `Dir` for file names that become program arguments.

use std::path::{Component, Path, PathBuf};

/// Whether the path `p` (`/`-separated, workspace-relative or absolute) is a `.git` directory
/// or lies in one, at any depth: git's own files, which can hold credentials (a remote URL
/// with a token, the auth header `actions/checkout` keeps in `.git/config`), and which no
/// plugin and no prompt is given. The one exception is `.git/info/exclude`, git's local
/// ignore list, which a search honours.
pub fn in_git_dir(p: &str) -> bool {
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    let Some(first) = parts.iter().position(|c| *c == ".git") else {
        return false;
    };
    parts[first + 1..] != ["info", "exclude"]
}

/// Whether `p` has a `.git` component: it names a repository's metadata or lies in it (a
/// workspace or a batch task's `dir` there is refused).
pub fn has_git_component(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
}

/// The real path of the open descriptor `fd`, as the kernel has it (`/proc/self/fd/N`).
pub fn real_path(fd: std::os::fd::RawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

/// Whether what `fd` is open on lies in a `.git` directory ([`in_git_dir`]) by its real path:
/// the part below the directory open as `root` when it lies there (a workspace may itself sit
/// below a directory of any name), else the whole. A link named anything (`docs -> .git`)
/// leads where it leads. `true` when a real path cannot be known: the check fails closed.
/// A hard link to the workspace's `.git/config` ([`links_git_config`]) counts as inside.
pub fn opened_in_git_dir(fd: std::os::fd::RawFd, root: std::os::fd::RawFd) -> bool {
    let Some(real) = real_path(fd) else {
        return true;
    };
    let root_path = real_path(root);
    if root_path
        .as_deref()
        .is_some_and(|r| links_git_config(fd, r))
    {
        return true;
    }
    let below = root_path.and_then(|r| real.strip_prefix(r).ok().map(Path::to_path_buf));
    in_git_dir(&below.unwrap_or(real).to_string_lossy())
}

/// Whether `fd` is open on a regular file with more than one link that is the file
/// `root/.git/config` (same device and inode): a hard link to git's configuration (from a
/// tarball, `cp -al`, a backup) named anything, anywhere in the workspace. One `fstat` for an
/// ordinary file; a `stat` of `.git/config` only when the file has other links.
pub fn links_git_config(fd: std::os::fd::RawFd, root: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{fd}")) else {
        return false;
    };
    if !meta.is_file() || meta.nlink() < 2 {
        return false;
    }
    std::fs::metadata(root.join(".git/config"))
        .is_ok_and(|c| c.dev() == meta.dev() && c.ino() == meta.ino())
}

/// Check that `p` is workspace-relative and stays inside (no absolute path, no `..`).
pub fn check_relative(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("is empty");
    }
    if p.contains('\0') {
        return Err("contains a NUL byte");
    }
    for c in Path::new(p).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err("contains `..`: paths must stay inside the workspace");
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("is absolute: paths are relative to the workspace");
            }
        }
    }
    Ok(())
}

/// Normalise a relative path (drop `.` components); `""` is the workspace root.
pub fn normalize(p: &str) -> PathBuf {
    Path::new(p)
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

/// A glob where `*` is any run of characters (possibly empty, `/` included) and `?` is one
/// byte (one character of ASCII text; a non-ASCII character is 2 to 4 bytes, so use `*`);
/// every other character, `[`, `{` and `\\` included, stands for itself. Matched by `globset`
/// (a regex underneath, so linear in the text whatever the number of stars).
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    matcher: globset::GlobMatcher,
}

impl Glob {
    /// Compile `pattern`; every string is a valid pattern (a property test checks it).
    pub fn new(pattern: &str) -> Glob {
        let mut escaped = String::with_capacity(pattern.len());
        let mut prev_star = false;
        for c in pattern.chars() {
            match c {
                // `**` would mean "any directories" to globset; here it is just `*`.
                '*' if prev_star => continue,
                '[' | ']' | '{' | '}' => escaped.extend(['[', c, ']']),
                _ => escaped.push(c),
            }
            prev_star = c == '*';
        }
        let matcher = globset::GlobBuilder::new(&escaped)
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .expect("every metacharacter but `*` and `?` is escaped")
            .compile_matcher();
        Glob {
            pattern: pattern.to_string(),
            matcher,
        }
    }

    /// Does the whole of `text` match?
    pub fn matches(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Glob) -> bool {
        self.pattern == other.pattern
    }
}

impl Eq for Glob {}

/// Does all of `text` match `pattern` (see [`Glob`])?
pub fn glob_match(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

/// The paths no plugin, edit or tool may create, change, delete or rename onto.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protected {
    globs: Vec<Glob>,
    /// Single paths protected for one use, with the reason (`Protected::also`).
    exact: Vec<(String, String)>,
}

/// Paths protected whatever the configuration says.
pub const ALWAYS_PROTECTED: &[&str] = &["kiln.toml", ".kiln/", ".git/"];

impl Protected {
    /// The built-in protections plus `[sandbox] protect` globs.
    pub fn new(extra: &[String]) -> Protected {
        Protected {
            globs: extra
                .iter()
                .map(|g| g.trim_start_matches("./").trim_end_matches('/').to_string())
                .filter(|g| !g.is_empty())
                .map(|g| Glob::new(&g))
                .collect(),
            exact: Vec::new(),
        }
    }

    /// Protect the one path `rel` too, saying `why` (a use's own reason, such as a file undo
    /// keeps no copy of).
    pub fn also(&mut self, rel: &str, why: String) {
        let key = normalize(rel).to_string_lossy().into_owned();
        self.exact.push((key, why));
    }

    /// Why `rel` is protected, or `None` when it may be written. `rel` is workspace-relative;
    /// it is normalised first, so `./kiln.toml` and `src/../kiln.toml` are caught too (the
    /// latter is refused earlier by [`check_relative`] anyway).
    pub fn why(&self, rel: &str) -> Option<String> {
        let norm = normalize(rel);
        let parts: Vec<String> = norm
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.is_empty() {
            return Some("it is the workspace root".into());
        }
        // At any depth: a nested repository or workspace (`vendor/x/.git`, `sub/kiln.toml`)
        // is one the user may work in next.
        if parts.last().is_some_and(|p| p == "kiln.toml") {
            return Some("kiln.toml is kiln's configuration".into());
        }
        if parts.iter().any(|p| p == ".kiln") {
            return Some(".kiln/ holds kiln's own state".into());
        }
        if parts.iter().any(|p| p == ".git") {
            return Some(".git/ is the repository's metadata".into());
        }
        let joined = parts.join("/");
        if let Some((_, why)) = self.exact.iter().find(|(p, _)| *p == joined) {
            return Some(why.clone());
        }
        for g in &self.globs {
            // A glob protects what it matches and everything below a directory it matches.
            let mut prefix = String::new();
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    prefix.push('/');
                }
                prefix.push_str(part);
                if g.matches(&prefix) {
                    let g = g.as_str();
                    return Some(format!("it matches `[sandbox] protect` entry `{g}`"));
                }
            }
            debug_assert_eq!(prefix, joined);
        }
        None
    }

    /// Why a read-write grant of directory `dir` would let a plugin write a protected path
    /// (the directory is protected itself, or a protected path may lie below it).
    pub fn covered_by(&self, dir: &str) -> Option<String> {
        let norm = normalize(dir);
        let d = norm.to_string_lossy().into_owned();
        if d.is_empty() {
            return Some(
                "the workspace root holds kiln.toml, .kiln/ and .git/, which no plugin may write"
                    .into(),
            );
        }
        if let Some(why) = self.why(&d) {
            return Some(why);
        }
        for g in self.globs.iter().map(Glob::as_str) {
            // The literal part of the glob before its first wildcard: a glob starting with a
            // wildcard may match below any directory.
            let literal: String = g.chars().take_while(|c| *c != '*' && *c != '?').collect();
            let inside = literal.is_empty()
                || literal.starts_with(&format!("{d}/"))
                || format!("{d}/").starts_with(&literal);
            if inside {
                return Some(format!(
                    "`[sandbox] protect` entry `{g}` may match paths inside it"
                ));
            }
        }
        None
    }
}

/// The form in which a workspace file named by a model or a user is passed to a program:
/// relative, and never starting with `-` or `@` (which programs read as options or response
/// files), so `-cimport os` becomes `./-cimport os`. The caller checks that it names an
/// existing regular file inside the workspace first.
pub fn as_argument(rel: &str) -> String {
    let trimmed = rel.trim_start_matches("./");
    if trimmed.starts_with('-') || trimmed.starts_with('@') {
        format!("./{trimmed}")
    } else {
        trimmed.to_string()
    }
}

/// Why a target file cannot be passed to a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The path is not workspace-relative ([`check_relative`] says why).
    #[error("target `{target}` {why}")]
    NotRelative { target: String, why: &'static str },
    /// The path names a directory or another non-file.
    #[error("target `{target}` is not a regular file: targets must be files of the workspace")]
    NotAFile { target: String },
    /// Nothing is at the path.
    #[error("target `{target}` does not exist in the workspace")]
    Missing { target: String },
    /// The path leads outside the workspace or cannot be examined.
    #[error("target `{target}` cannot be used: {reason} (paths must stay inside the workspace)")]
    Unusable { target: String, reason: String },
}

/// Check a target file named by a model or a user before it becomes a program argument: it
/// must be workspace-relative, resolve inside the workspace (a symlink leading out is refused
/// by cap-std) and be an existing regular file. Returns the argument form ([`as_argument`]).
pub fn target_argument(root: &cap_std::fs::Dir, rel: &str) -> Result<String, TargetError> {
    let target = rel.to_string();
    check_relative(rel).map_err(|why| TargetError::NotRelative {
        target: target.clone(),
        why,
    })?;
    match root.metadata(rel) {
        Ok(m) if m.is_file() => Ok(as_argument(rel)),
        Ok(_) => Err(TargetError::NotAFile { target }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(TargetError::Missing { target }),
        Err(e) => Err(TargetError::Unusable {
            target,
            reason: e.to_string(),
        }),
    }
}

/// [`target_argument`] for every target.
pub fn target_arguments(
    root: &cap_std::fs::Dir,
    targets: &[String],
) -> Result<Vec<String>, TargetError> {
    targets.iter().map(|t| target_argument(root, t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_only() {
        assert!(check_relative("src/a.c").is_ok());
        assert!(check_relative("./src").is_ok());
        assert!(check_relative("../x").is_err());
        assert!(check_relative("a/../../x").is_err());
        assert!(check_relative("/etc").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*.c", "src/a.c"));
        assert!(!glob_match("*.c", "a.h"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("--*=*", "--x=1"));
        assert!(!glob_match("gcc", "gcc2"));
        assert!(glob_match("src/**", "src/a/b.c"), "`**` is `*`");
        assert!(glob_match("a?c", "a/c"), "`?` and `*` cross `/`");
        // globset matches bytes: `?` is one byte, so one character of ASCII text only.
        assert!(!glob_match("a?c", "aéc") && glob_match("a??c", "aéc"));
        assert!(glob_match("a*c", "aéc") && glob_match("é*", "é.pem"));
        for literal in ["[a-z]", "{a,b}", "a\\*", "x]"] {
            assert!(!glob_match(literal, "a"), "{literal} is literal");
        }
        assert!(glob_match("[a-z]*", "[a-z]x"));
        assert!(glob_match("{a,b}", "{a,b}"));
        assert!(glob_match("a\\*", "a\\bc"));
    }

    /// Plain backtracking over `*` takes exponential time on this pattern; the regex does not.
    #[test]
    fn many_stars_match_in_linear_time() {
        let text = "a".repeat(10_000);
        let start = std::time::Instant::now();
        assert!(!glob_match(&format!("{}b", "a*".repeat(30)), &text));
        assert!(glob_match(&format!("{}a", "a*".repeat(30)), &text));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    /// The matcher globset replaced (greedy, one backtrack point), kept as the oracle that
    /// pins the semantics on ASCII text.
    fn backtracking_match(pattern: &str, text: &str) -> bool {
        let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
        let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                (pi, ti) = (pi + 1, ti + 1);
            } else if pi < p.len() && p[pi] == '*' {
                (star, mark, pi) = (Some(pi), ti, pi + 1);
            } else if let Some(s) = star {
                (pi, mark) = (s + 1, mark + 1);
                ti = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }

    proptest::proptest! {
        /// On ASCII text, globset answers what the hand-written matcher answered.
        #[test]
        fn same_answers_as_the_old_matcher(p in "[ab*?/\\[{.-]{0,8}", t in "[ab/\\[{.-]{0,10}") {
            proptest::prop_assert_eq!(glob_match(&p, &t), backtracking_match(&p, &t), "{} {}", p, t);
        }

        /// Every string compiles, and one without `*` or `?` matches only itself.
        #[test]
        fn every_pattern_compiles(p in "\\PC{0,12}", t in "\\PC{0,12}") {
            let g = Glob::new(&p);
            if !p.contains(['*', '?']) {
                proptest::prop_assert!(g.matches(&p));
                proptest::prop_assert_eq!(g.matches(&t), t == p);
            }
        }
    }

    #[test]
    fn protected_paths() {
        let p = Protected::new(&["secrets/".into(), "*.pem".into()]);
        for bad in [
            "kiln.toml",
            "./kiln.toml",
            ".kiln/kiln.db",
            ".git/hooks/post-checkout",
            "vendor/lib/.git/config",
            "sub/kiln.toml",
            "sub/.kiln/x",
            "secrets/key",
            "a/b/c.pem",
        ] {
            assert!(p.why(bad).is_some(), "{bad} should be protected");
        }
        for ok in [
            "src/kiln.toml.bak",
            "src/main.rs",
            ".github/x.yml",
            "secretsx",
            ".kilnx",
        ] {
            assert_eq!(p.why(ok), None, "{ok}");
        }
        assert!(p.covered_by(".").is_some());
        assert!(p.covered_by("secrets").is_some());
        assert!(p.covered_by("src").is_some(), "*.pem may match inside src");
        let q = Protected::new(&["docs/private/*".into()]);
        assert!(q.covered_by("src").is_none());
        assert!(q.covered_by("docs").is_some());
        assert!(q.covered_by("docs/private").is_some());
    }

    #[test]
    fn arguments_never_look_like_options() {
        assert_eq!(as_argument("-cimport os"), "./-cimport os");
        assert_eq!(as_argument("@args"), "./@args");
        assert_eq!(as_argument("./src/a.c"), "src/a.c");
        assert_eq!(as_argument("src/-a.c"), "src/-a.c");
    }

    #[test]
    fn only_gits_local_ignore_list_is_outside_the_rule() {
        for p in [
            ".git",
            ".git/config",
            "a/.git/x",
            "/h/u/.git/info",
            ".git/info/exclude/x",
        ] {
            assert!(in_git_dir(p), "{p}");
        }
        for p in [
            "a/b",
            ".gitignore",
            "x.git/y",
            ".git/info/exclude",
            "a/.git/info/exclude",
        ] {
            assert!(!in_git_dir(p), "{p}");
        }
    }
}
