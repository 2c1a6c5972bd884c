//! The guard's resolution of guest paths on a real directory tree: protected entries reached
//! directly, through `..`, through a link (to a directory or at the end), or not resolvable,
//! are refused; everything else passes.

use super::*;
use std::os::unix::fs::symlink;

/// A workspace holding `sub/` (a nested repository with `sub/.git/config`), the links
/// `sub/docs -> .git` and `sub/dangling -> .git/hooks/pre-commit`, and `sub/ok.txt`; the
/// guard of a call and `sub` opened.
fn setup(protect: &[&str]) -> (tempfile::TempDir, FsGuard, std::fs::File) {
    let t = tempfile::tempdir().unwrap();
    let sub = t.path().join("sub");
    std::fs::create_dir_all(sub.join(".git")).unwrap();
    std::fs::write(sub.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(sub.join("ok.txt"), "ok\n").unwrap();
    std::fs::write(sub.join("secret.key"), "k\n").unwrap();
    symlink(".git", sub.join("docs")).unwrap();
    symlink(".git/hooks/pre-commit", sub.join("dangling")).unwrap();
    symlink("ok.txt", sub.join("to-ok")).unwrap();
    let root = cap_std::fs::Dir::open_ambient_dir(t.path(), cap_std::ambient_authority()).unwrap();
    let protect: Vec<String> = protect.iter().map(|s| s.to_string()).collect();
    let guard = FsGuard::new(Arc::new(WritePolicy::new(&root, Protected::new(&protect))));
    let dir = std::fs::File::open(&sub).unwrap();
    (t, guard, dir)
}

#[test]
fn protected_entries_are_refused_however_they_are_named() {
    let (_t, g, sub) = setup(&[]);
    let d = sub.as_raw_fd();
    for (path, follow) in [
        (".git/config", true),
        (".git/config", false),
        (".git", false),
        (".git/", false),
        ("./.git/hooks", false),
        ("a/../.git/config", false),
        ("docs/config", false),
        ("docs/config", true),
        ("docs", true),
        ("dangling", true),
        ("kiln.toml", false),
        (".kiln", false),
        (".kiln/x", false),
        ("../sub/.git/config", false),
        ("/etc/passwd", false),
        ("missing/x", false),
    ] {
        assert!(
            g.check_entry(d, path, follow).is_err(),
            "{path} (follow: {follow}) must be refused"
        );
    }
    let r = g.refusals().unwrap();
    assert!(
        r.contains("`sub/.git/config`") && r.contains("more") && r.contains(".git/"),
        "{r}"
    );
}

#[test]
fn ordinary_entries_pass() {
    let (_t, g, sub) = setup(&[]);
    let d = sub.as_raw_fd();
    for (path, follow) in [
        ("ok.txt", true),
        ("new.txt", true),
        ("to-ok", true),
        ("to-ok", false),
        // The link itself (renamed or removed), not where it leads.
        ("docs", false),
        ("dangling", false),
        (".", false),
        ("./ok.txt", false),
        ("kiln.toml.bak", false),
    ] {
        assert!(
            g.check_entry(d, path, follow).is_ok(),
            "{path} (follow: {follow}) must pass"
        );
    }
    assert!(g.refusals().is_none());
}

#[test]
fn open_descriptors_are_checked_by_what_they_are_open_on() {
    let (t, g, _sub) = setup(&[]);
    let config = std::fs::File::open(t.path().join("sub/.git/config")).unwrap();
    assert!(g.check_open(config.as_raw_fd()).is_err());
    let ok = std::fs::File::open(t.path().join("sub/ok.txt")).unwrap();
    assert!(g.check_open(ok.as_raw_fd()).is_ok());
}

#[test]
fn sandbox_protect_globs_are_held_and_an_unknown_workspace_refuses_everything() {
    let (_t, g, sub) = setup(&["sub/*.key"]);
    assert!(g.check_entry(sub.as_raw_fd(), "secret.key", false).is_err());
    assert!(g.check_entry(sub.as_raw_fd(), "ok.txt", false).is_ok());
    let unknown = FsGuard::new(Arc::new(WritePolicy {
        root: None,
        protected: Protected::default(),
    }));
    assert!(
        unknown
            .check_entry(sub.as_raw_fd(), "ok.txt", false)
            .is_err()
    );
    assert!(
        unknown.refusals().unwrap().contains("cannot tell"),
        "{:?}",
        unknown.refusals()
    );
}

#[test]
fn an_open_descriptor_inside_git_is_refused_by_its_real_path() {
    let (t, g, _sub) = setup(&[]);
    let open = |rel: &str| std::fs::File::open(t.path().join(rel)).unwrap();
    // Reached by a link (`sub/docs -> .git`) or directly, a file or the directory itself.
    for (rel, named) in [
        ("sub/docs/config", "docs/config"),
        ("sub/.git/config", ".git/config"),
        ("sub/.git", "./.git"),
    ] {
        let f = open(rel);
        assert!(g.check_read(f.as_raw_fd(), named).is_err(), "{rel}");
    }
    let line = g.refusals().unwrap();
    assert!(
        line.contains("refused to open `sub/.git/config` (and 2 more)")
            && line.contains("(named `docs/config`)"),
        "{line}"
    );
    // The workspace's own files, a link to one, and git's local ignore list pass.
    std::fs::create_dir_all(t.path().join("sub/.git/info")).unwrap();
    std::fs::write(t.path().join("sub/.git/info/exclude"), "x\n").unwrap();
    let fresh = FsGuard::new(g.policy.clone());
    for rel in ["sub/ok.txt", "sub/to-ok", "sub", "sub/.git/info/exclude"] {
        let f = open(rel);
        assert!(fresh.check_read(f.as_raw_fd(), rel).is_ok(), "{rel}");
    }
    assert!(fresh.refusals().is_none());
    // No real path (not a descriptor): refused.
    assert!(fresh.check_read(-1, "x").is_err());
}
