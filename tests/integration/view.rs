//! The world a program kiln runs sees (`kiln-sandbox`'s view): built for the call, so what was
//! not put in does not exist. Each test is one way out that a filter once left open: git
//! hooks, a `libexec -> /` link, `/etc/shadow` for root, kernel keyrings, other processes'
//! command lines, a UNIX socket in `$HOME`, metadata of the user's files, special files.

use crate::support::{Run, Workspace};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `kiln check --cmd CMD --file a.txt --json` in `ws`.
fn check(ws: &Workspace, cmd: &str) -> Run {
    ws.kiln(&["check", "--cmd", cmd, "--file", "a.txt", "--json"], &[])
}

/// The program's stdout and stderr.
fn output(r: &Run) -> String {
    let j = r.json();
    format!(
        "{}{}",
        j["stdout"].as_str().unwrap_or(""),
        j["stderr"].as_str().unwrap_or("")
    )
}

fn workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws
}

#[test]
fn git_metadata_kiln_toml_and_kiln_state_are_read_only_at_any_depth() {
    let ws = workspace();
    ws.write(".git/config", "[core]\n");
    ws.write(".git/hooks/README", "hooks\n");
    ws.write("vendor/lib/.git/config", "[core]\n");
    ws.write("kiln.toml", "");
    ws.write(".kiln/keep", "");
    let r = check(
        &ws,
        "sh -c 'echo evil > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf \"[core]\\n\\tfsmonitor = /tmp/evil\\n\" >> .git/config; \
         echo x >> vendor/lib/.git/config; rm -f vendor/lib/.git/config; \
         echo \"[llm]\" >> kiln.toml; echo x > .kiln/planted; \
         mv .git .git-moved; echo written > a.txt; echo done'",
    );
    let out = output(&r);
    assert!(out.contains("done"), "{out}\n{}", r.stderr());
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!ws.root().join(".git/hooks/pre-commit").exists(), "{out}");
    assert_eq!(ws.read(".git/config"), "[core]\n");
    assert_eq!(ws.read("vendor/lib/.git/config"), "[core]\n");
    assert_eq!(ws.read("kiln.toml"), "");
    assert!(!ws.root().join(".kiln/planted").exists());
    assert!(ws.root().join(".git").is_dir());
    // The workspace itself stays writable.
    assert_eq!(ws.read("a.txt"), "written\n");
}

#[test]
fn a_link_the_repository_ships_under_its_program_prefix_shows_nothing_outside() {
    let ws = workspace();
    let secret = ws.path().join("id_secret");
    std::fs::write(&secret, "s3cret-key").unwrap();
    ws.write(
        "bin/test",
        &format!("#!/bin/sh\ncat {} {}\n", secret.display(), "/etc/hostname"),
    );
    std::fs::set_permissions(
        ws.root().join("bin/test"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("/", ws.root().join("libexec")).unwrap();
    std::os::unix::fs::symlink("/", ws.root().join("lib")).unwrap();
    let r = check(&ws, "bin/test");
    let out = output(&r);
    assert!(!out.contains("s3cret-key"), "{out}");
    assert!(out.contains("No such file or directory"), "{out}");
}

#[test]
fn etc_holds_what_programs_need_and_never_shadow_even_for_root() {
    let ws = workspace();
    let r = check(
        &ws,
        "sh -c 'cat /etc/shadow; cat /etc/gshadow; ls /etc/ssh /etc/ssl/private; ls /etc; id -un'",
    );
    let out = output(&r);
    assert!(!out.contains("root:$") && !out.contains("root:*:"), "{out}");
    assert!(
        out.contains("/etc/shadow: No such file or directory"),
        "{out}"
    );
    for needed in ["passwd", "group", "hosts", "ld.so.cache"] {
        if Path::new("/etc").join(needed).exists() {
            assert!(out.lines().any(|l| l == needed), "{needed} missing: {out}");
        }
    }
    assert!(
        !out.lines().any(|l| l == "shadow" || l == "sudoers"),
        "{out}"
    );
    // Users still resolve (id reads /etc/passwd).
    let me = if unsafe { libc::getuid() } == 0 {
        "root"
    } else {
        ""
    };
    assert!(out.contains(me), "{out}");
}

#[test]
fn keyrings_are_out_of_reach() {
    let ws = workspace();
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING) and of the session keyring;
    // x86-64 numbers (perl is in every Debian).
    let r = check(
        &ws,
        "perl -e '$!=0; $u=syscall(250, 0, -4, 0); print \"user $u $!\\n\"; $!=0; $s=syscall(250, 0, -3, 0); print \"session $s $!\\n\"'",
    );
    let out = output(&r);
    assert!(out.contains("user -1 Permission denied"), "{out}");
    assert!(out.contains("session -1 Permission denied"), "{out}");
}

#[test]
fn other_processes_are_invisible_in_proc() {
    let ws = workspace();
    let mut outside = std::process::Command::new("sleep")
        .arg("97.25")
        .spawn()
        .unwrap();
    let r = check(
        &ws,
        "sh -c 'cat /proc/*/cmdline | tr \"\\0\" \" \"; echo; ls /proc | grep -c \"^[0-9]\"; cat /proc/1/cmdline | tr \"\\0\" \" \"'",
    );
    let _ = outside.kill();
    let _ = outside.wait();
    let out = output(&r);
    assert!(!out.contains("97.25"), "a host process was visible: {out}");
    assert!(out.contains("cat"), "its own processes are: {out}");
}

#[test]
fn a_unix_socket_in_home_cannot_be_reached() {
    let ws = workspace();
    let sock = ws.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let r = check(
        &ws,
        &format!(
            "perl -MIO::Socket::UNIX -e '$s = IO::Socket::UNIX->new(Peer => \"{}\"); print $s ? \"connected\\n\" : \"refused: $!\\n\"'",
            sock.display()
        ),
    );
    let out = output(&r);
    assert!(out.contains("refused"), "{out}");
    assert!(listener.accept().is_err(), "the socket took a connection");
}

#[test]
fn metadata_of_the_users_files_outside_the_workspace_is_untouched() {
    let ws = workspace();
    let file = ws.path().join("notes.txt");
    std::fs::write(&file, "mine\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&file).unwrap();
    let r = check(
        &ws,
        &format!(
            "sh -c 'chmod 777 {f}; touch -d 2001-01-01 {f}; echo tried'",
            f = file.display()
        ),
    );
    let out = output(&r);
    assert!(out.contains("tried"), "{out}");
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(after.permissions().mode() & 0o777, 0o640, "{out}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(after.mtime(), before.mtime(), "{out}");
}

#[test]
fn no_special_file_and_no_set_user_id_file_can_be_made() {
    let ws = workspace();
    let r = check(
        &ws,
        "python3 -c \"
import os, stat
for name, mode in [('suid', stat.S_IFREG | 0o4755), ('dev', stat.S_IFCHR | 0o644), ('sock', stat.S_IFSOCK | 0o644), ('fifo', stat.S_IFIFO | 0o644), ('plain', stat.S_IFREG | 0o644)]:
    try:
        os.mknod(name, mode, os.makedev(1, 3))
        print(name, 'made')
    except OSError as e:
        print(name, 'refused', e.errno)
\"",
    );
    let out = output(&r);
    for refused in ["suid", "dev", "sock"] {
        assert!(out.contains(&format!("{refused} refused")), "{out}");
        assert!(!ws.root().join(refused).exists(), "{out}");
    }
    assert!(
        out.contains("fifo made") && out.contains("plain made"),
        "{out}"
    );
}

#[test]
fn programs_find_their_tools_on_path_and_home_is_empty() {
    let ws = workspace();
    let local_bin = ws.path().join(".local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    std::fs::write(
        local_bin.join("hello-kiln"),
        "#!/bin/sh\necho hello from local bin\n",
    )
    .unwrap();
    std::fs::set_permissions(
        local_bin.join("hello-kiln"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(ws.path().join(".netrc"), "machine x password p\n").unwrap();
    let path = format!(
        "{}:{}",
        local_bin.display(),
        kiln_env::env().var("PATH").unwrap_or_default()
    );
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "sh -c 'hello-kiln; python3 --version; ls -A $HOME; echo tmp=$TMPDIR; touch /tmp/t && echo tmp-ok'",
            "--file",
            "a.txt",
            "--json",
        ],
        &[("PATH", &path)],
    );
    let out = output(&r);
    assert!(out.contains("hello from local bin"), "{out}");
    assert!(out.contains("Python 3"), "{out}");
    assert!(!out.contains(".netrc"), "HOME is empty: {out}");
    assert!(out.contains("tmp=/tmp") && out.contains("tmp-ok"), "{out}");
}

#[test]
fn a_protected_name_that_is_a_link_never_carries_a_mount_elsewhere() {
    let ws = workspace();
    std::fs::write(ws.path().join("id_home"), "home-secret").unwrap();
    std::fs::create_dir_all(ws.root().join("x")).unwrap();
    // `x/.git -> ../..` resolves to $HOME: mounted there, it would show the real home over
    // the call's empty one.
    std::os::unix::fs::symlink("../..", ws.root().join("x/.git")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.root().join(".kiln")).unwrap();
    let r = check(
        &ws,
        &format!("sh -c 'cat {}/id_home; echo ran'", ws.path().display()),
    );
    let out = output(&r);
    assert!(out.contains("ran"), "{out}\n{}", r.stderr());
    assert!(!out.contains("home-secret"), "{out}");
}

#[test]
fn a_git_directory_named_by_a_git_file_is_read_only_too() {
    let ws = workspace();
    // `git init --separate-git-dir=gitdata sub`: sub/.git is a file naming ../gitdata.
    ws.write("gitdata/hooks/README", "hooks\n");
    ws.write("gitdata/config", "[core]\n");
    ws.write("sub/.git", "gitdir: ../gitdata\n");
    let r = check(
        &ws,
        "sh -c 'echo evil > gitdata/hooks/pre-commit; echo x >> gitdata/config; echo done'",
    );
    let out = output(&r);
    assert!(
        out.contains("done") && out.contains("Read-only file system"),
        "{out}"
    );
    assert!(!ws.root().join("gitdata/hooks/pre-commit").exists());
    assert_eq!(ws.read("gitdata/config"), "[core]\n");
}

#[test]
fn host_wide_kernel_settings_are_read_only_even_without_landlock() {
    let ws = workspace();
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "sh -c 'cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern; echo tried'",
            "--file",
            "a.txt",
            "--json",
        ],
        &[("KILN_TEST_NO_LANDLOCK", "1")],
    );
    let out = output(&r);
    assert!(out.contains("tried"), "{out}\n{}", r.stderr());
    assert!(out.contains("Read-only file system"), "{out}");
}

#[test]
fn a_nested_protected_path_cannot_be_moved_away_with_its_parent() {
    let ws = workspace();
    ws.write("sub/.git/config", "[core]\n");
    ws.write("sub/file.txt", "kept\n");
    // Rename the parent (the read-only .git moves with it), then plant a writable .git.
    let r = check(
        &ws,
        "sh -c 'mv -T sub .sub-old; mkdir -p sub/.git && echo planted > sub/.git/config; echo x > sub/file.txt; echo done'",
    );
    let out = output(&r);
    assert!(out.contains("done"), "{out}\n{}", r.stderr());
    assert_eq!(ws.read("sub/.git/config"), "[core]\n", "{out}");
    assert!(!ws.root().join(".sub-old").exists(), "{out}");
    // The directory itself stays writable.
    assert_eq!(ws.read("sub/file.txt"), "x\n");
}

/// A program cannot create a protected name the view did not hold (none existed when the call
/// began): a nested `.git` with an `fsmonitor` command that the user's own `git status` would
/// run outside the sandbox, a root `kiln.toml`. kiln removes each after the call, names them,
/// and refuses the call's result. (`.kiln` holds nothing kiln trusts: a new one is left.)
#[test]
fn a_program_cannot_plant_a_new_git_or_kiln_toml() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws.write(
        "plant.sh",
        "mkdir -p pkg/.git && printf '[core]\\n\\tfsmonitor = \"touch PWNED\"\\n' > pkg/.git/config\nmkdir -p deep/.kiln && echo x > deep/.kiln/x\necho '[fix]' > kiln.toml\necho planted\n",
    );
    let r = ws.kiln(
        &["check", "--cmd", "sh plant.sh", "--file", "a.txt", "--json"],
        &[],
    );
    assert_ne!(r.code(), 0, "{}", r.stdout());
    let err = r.stderr();
    for p in ["`kiln.toml`", "`pkg/.git`"] {
        assert!(err.contains(p), "{p} not named: {err}");
    }
    assert!(err.contains("kiln removed them"), "{err}");
    for p in ["pkg/.git", "kiln.toml"] {
        assert!(!ws.root().join(p).exists(), "{p} is still there");
    }
    assert!(!err.contains("deep/.kiln"), "{err}");
    // What existed stays, and a program that creates nothing protected runs as before.
    assert!(ws.root().join("pkg").is_dir() && ws.root().join("deep").is_dir());
    ws.kiln(&["check", "--cmd", "true", "--file", "a.txt"], &[])
        .expect_code(0);
}

/// F2: a program kiln runs (a runner, `run_cmd`, a hook) reads `.git/config`, and its output
/// goes to the model, `--json` and the store. The view shows every git directory's `config`
/// without its credentials (the token in a remote URL, `http.extraheader`), the rest intact:
/// git still works there.
#[test]
fn programs_see_git_config_without_its_credentials_and_git_still_works() {
    let ws = Workspace::new();
    let root = ws.root();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", ws.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    ws.write("main.c", "int main(){return 0;}\n");
    ws.write("sub/lib.c", "int x;\n");
    for dir in [root.clone(), root.join("sub")] {
        git(&dir, &["init", "-q"]);
        git(&dir, &["config", "user.email", "a@b"]);
        git(&dir, &["config", "user.name", "a"]);
        git(
            &dir,
            &[
                "remote",
                "add",
                "origin",
                "https://x-access-token:GITCONFIG-SECRET@github.com/o/r.git",
            ],
        );
        git(
            &dir,
            &[
                "config",
                "http.extraheader",
                "AUTHORIZATION: basic EXTRAHEADER-SECRET",
            ],
        );
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-qm", "first commit"]);
    }
    ws.write("main.c", "int main(){return 1;}\n");
    let r = ws.kiln(
        &[
            "check",
            "--shell",
            "--cmd",
            "cat .git/config sub/.git/config; git status --short; git log --oneline; git remote -v; git -C sub log --oneline",
            "--json",
        ],
        &[],
    );
    let out = r.json()["stdout"].as_str().unwrap().to_string();
    assert!(!out.contains("SECRET"), "{out}");
    assert!(!out.contains("x-access-token"), "{out}");
    assert!(
        out.contains("url = https://github.com/o/r.git")
            && out.contains("[user]")
            && out.contains("origin\thttps://github.com/o/r.git (fetch)"),
        "the rest of the config is there: {out}"
    );
    assert!(out.contains(" M main.c"), "git status works: {out}");
    assert_eq!(
        out.matches("first commit").count(),
        2,
        "git log works: {out}"
    );
    // The real config is untouched.
    let real = std::fs::read_to_string(root.join(".git/config")).unwrap();
    assert!(real.contains("GITCONFIG-SECRET") && real.contains("EXTRAHEADER-SECRET"));
}
