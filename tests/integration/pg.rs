//! A throwaway PostgreSQL for tests: `initdb` into a temporary directory and a `postgres`
//! listening only on 127.0.0.1 at a free port (no Unix socket), password authentication,
//! durability off for speed. As root, the cluster runs as `nobody` (`initdb` refuses root).
//! [`PgServer::shared`] is one cluster per test binary, stopped (and its directory removed)
//! when the binary exits; [`PgServer::start`] is a private one for tests that stop and
//! restart the server. Each test takes its own database with [`PgServer::fresh_db`].
//!
//! The postmaster is spawned and waited for by a keeper thread that lives as long as the
//! process, with `PR_SET_PDEATHSIG`: a test binary that is killed takes its server with it,
//! and the server is always reaped (PID 1 here reaps no orphans). The host's unit tests
//! include this file too, as `crate::store::test_pg` (`#[path]`), so it uses nothing but std,
//! `libc`, `tempfile` and `postgres`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The password of the `kiln` superuser of every test cluster (tests check it never shows).
pub const PASSWORD: &str = "pg-test-secret-7Qx";

/// A running test cluster.
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// The postmaster's pid while it runs (0: stopped).
    pid: Mutex<i32>,
    /// Told when the keeper thread has reaped the postmaster.
    reaped: Mutex<Option<mpsc::Receiver<()>>>,
    next_db: AtomicU32,
    /// Whether this server removes its directory when stopped for good.
    owned_dir: Option<tempfile::TempDir>,
}

static SHARED: OnceLock<PgServer> = OnceLock::new();

extern "C" fn stop_shared_at_exit() {
    if let Some(s) = SHARED.get() {
        s.stop();
        let _ = std::fs::remove_dir_all(&s.dir);
    }
}

/// Where the PostgreSQL programs are: the newest `/usr/lib/postgresql/*/bin` with `initdb`,
/// else `PATH`.
fn pg_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return bin;
    }
    kiln_env::env()
        .path()
        .and_then(|p| std::env::split_paths(p).find(|d| d.join("initdb").is_file()))
        .expect("PostgreSQL is not installed (no initdb): `.ci/run` installs it (apt-get install postgresql)")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `nobody`'s uid and gid when running as root.
const NOBODY: u32 = 65534;

/// `cmd` run as the cluster's user, from a directory that user can enter.
fn as_cluster_user<'c>(cmd: &'c mut Command, dir: &Path) -> &'c mut Command {
    use std::os::unix::process::CommandExt;
    if is_root() {
        cmd.uid(NOBODY).gid(NOBODY).env("HOME", dir);
    }
    cmd.current_dir(dir)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().unwrap().port()
}

impl PgServer {
    /// The cluster of this test binary, started on first use.
    pub fn shared() -> &'static PgServer {
        SHARED.get_or_init(|| {
            let s = PgServer::start();
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(stop_shared_at_exit) };
            s
        })
    }

    /// A cluster of the caller's own (stopped and removed on drop).
    pub fn start() -> PgServer {
        // As root, under /tmp: `nobody` must be able to reach it (a TMPDIR may be private).
        let mut builder = tempfile::Builder::new();
        builder.prefix("kiln-pg-");
        let tmp = if is_root() {
            builder.tempdir_in("/tmp")
        } else {
            builder.tempdir()
        }
        .expect("temporary directory");
        let dir = tmp.path().to_path_buf();
        if is_root() {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
        }
        let bin = pg_bin();
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        let out = as_cluster_user(&mut Command::new(bin.join("initdb")), &dir)
            .args([
                "-U",
                "kiln",
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "-N",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .arg("-D")
            .arg(dir.join("data"))
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let server = PgServer {
            dir,
            bin,
            port: free_port(),
            pid: Mutex::new(0),
            reaped: Mutex::new(None),
            next_db: AtomicU32::new(0),
            owned_dir: Some(tmp),
        };
        server.start_again();
        server
    }

    /// Start the (stopped) server again on the same port and data.
    pub fn start_again(&self) {
        let log = std::fs::File::create(self.dir.join("log")).unwrap();
        if is_root() {
            let _ = std::os::unix::fs::chown(self.dir.join("log"), Some(NOBODY), Some(NOBODY));
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        as_cluster_user(&mut cmd, &self.dir)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let (pid_tx, pid_rx) = mpsc::channel();
        let (reaped_tx, reaped_rx) = mpsc::channel();
        // The keeper: spawns the postmaster (which dies with this thread, that is with the
        // process) and reaps it.
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(mut child) => {
                    let _ = pid_tx.send(Ok(child.id() as i32));
                    let _ = Child::wait(&mut child);
                    let _ = reaped_tx.send(());
                    // Outlive the process: the death signal is tied to this thread.
                    loop {
                        std::thread::park();
                    }
                }
                Err(e) => {
                    let _ = pid_tx.send(Err(e));
                }
            }
        });
        let pid = pid_rx.recv().unwrap().expect("spawn postgres");
        *self.pid.lock().unwrap() = pid;
        *self.reaped.lock().unwrap() = Some(reaped_rx);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self
                .admin(|c| c.simple_query("SELECT 1").map(|_| ()))
                .is_ok()
            {
                return;
            }
            let gone = self
                .reaped
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|r| r.try_recv().is_ok());
            if gone || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                panic!("test PostgreSQL did not start on port {}: {log}", self.port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server (fast shutdown) and wait until it is reaped.
    pub fn stop(&self) {
        let mut pid = self.pid.lock().unwrap_or_else(|p| p.into_inner());
        if *pid == 0 {
            return;
        }
        // SAFETY: signalling the postmaster this process started.
        unsafe { libc::kill(*pid, libc::SIGINT) };
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(r) = reaped
            && r.recv_timeout(Duration::from_secs(10)).is_err()
        {
            // SAFETY: as above; it did not stop in time.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
            let _ = r.recv_timeout(Duration::from_secs(5));
        }
        *pid = 0;
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` (with the password).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://kiln:{PASSWORD}@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// A new, empty database of its own; returns its URL.
    pub fn fresh_db(&self) -> String {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        self.admin(|c| c.batch_execute(&format!("CREATE DATABASE {name}")))
            .expect("CREATE DATABASE");
        self.url(&name)
    }

    /// Run `f` on a connection to the `postgres` database (on a thread of its own, so a
    /// caller inside a tokio runtime may use it too).
    pub fn admin<R: Send>(
        &self,
        f: impl FnOnce(&mut ::postgres::Client) -> Result<R, ::postgres::Error> + Send,
    ) -> Result<R, ::postgres::Error> {
        let url = self.url("postgres");
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls)?;
                f(&mut c)
            })
            .join()
            .unwrap()
        })
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The data directory's parent (temporary).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(tmp) = self.owned_dir.take() {
            let _ = std::fs::remove_dir_all(tmp.path());
        }
    }
}
