//! One MariaDB server of a test's own, from the machine's MariaDB binaries: a data directory
//! in a temporary directory, a free port, listening on 127.0.0.1 only, its socket, pid file
//! and log in that directory. It can be what the machine's shared MariaDB must never be made
//! to be, a read-only server (`--read-only`) for one. Killed and deleted when dropped.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;
use crate::scratch::{TempDir, run};

/// Settings for both the bootstrap and the server: InnoDB's redo log and buffer pool sized for
/// a test (the defaults are 96 and 128 MiB), no fsync (the data dies with the test, as
/// PostgreSQL's `fsync = off` in [`crate::postgres`]). The log size is the same for both, or
/// the server would resize the log the bootstrap wrote.
const SMALL_AND_UNSYNCED: [&str; 4] = [
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=16M",
    "--innodb-flush-method=nosync",
    "--innodb-flush-log-at-trx-commit=0",
];

/// How long the server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running `mariadbd` on a data directory of its own; `root` has no password and connects
/// over TCP.
#[derive(Debug)]
pub struct MariaDbNode {
    pub port: u16,
    child: Child,
    dir: TempDir,
}

impl MariaDbNode {
    /// A new data directory (`mariadb-install-db`, `root` without a password instead of
    /// unix-socket authentication), and the server started on it with `args` added (such as
    /// `--read-only`); returns once the server accepts connections.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// [`MariaDbNode::start`] with `env` added to the server's environment (the bootstrap's
    /// is left alone).
    pub fn start_with(args: &[&str], env: &[(&str, String)]) -> Self {
        let dir = TempDir::new("test-mariadb");
        let data = dir.0.join("data");
        run(Command::new("mariadb-install-db")
            // First, or it is not honoured: the machine's my.cnf is for the machine's server.
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            // Its own, as the server's below: a server starting up deletes every `#sql*`
            // file in its tmpdir, so bootstraps sharing /tmp delete each other's temporary
            // tables and fail.
            .arg(format!("--tmpdir={}", dir.0.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(as_root())
            .args(SMALL_AND_UNSYNCED));
        let port = free_port();
        let in_dir = |name: &str| dir.0.join(name).display().to_string();
        let child = Command::new(mariadbd())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            // Its own socket and pid file: the defaults (/run/mysqld) are the machine's
            // server's.
            .arg(format!("--socket={}", in_dir("mariadbd.sock")))
            .arg(format!("--pid-file={}", in_dir("mariadbd.pid")))
            .arg(format!("--log-error={}", in_dir("server.log")))
            .arg(format!("--tmpdir={}", dir.0.display()))
            // Accounts are matched by address: no reverse lookup of 127.0.0.1.
            .arg("--skip-name-resolve")
            .args(as_root())
            .args(SMALL_AND_UNSYNCED)
            .args(args)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts (is MariaDB installed?)");
        let mut node = Self { port, child, dir };
        node.await_connections();
        node
    }

    /// Polls with a query until one is answered; fails the test, with the server's log, if
    /// the server exits or the deadline passes first.
    fn await_connections(&mut self) {
        let until = Instant::now() + START_DEADLINE;
        loop {
            if self.client("SELECT 1").status.success() {
                return;
            }
            let exited = self.child.try_wait().expect("the server's status");
            assert!(
                exited.is_none() && Instant::now() < until,
                "the private MariaDB did not accept connections ({}): {}",
                exited.map_or_else(
                    || format!("not within {START_DEADLINE:?}"),
                    |s| s.to_string()
                ),
                std::fs::read_to_string(self.dir.0.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What `mariadb -N -B -e sql` prints, as `root` over TCP.
    pub fn sql(&self, sql: &str) -> String {
        let output = self.client(sql);
        assert!(
            output.status.success(),
            "mariadb {sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Ends every client session but the one asking, as a network cut or a `KILL` would:
    /// their next statement fails.
    pub fn kill_client_sessions(&self) {
        let sessions = self.sql(
            "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND USER = 'root'",
        );
        for session in sessions.lines() {
            // One may end on its own meanwhile: an unknown thread id is no failure here.
            let _ = self.client(&format!("KILL {session}"));
        }
    }

    fn client(&self, sql: &str) -> Output {
        Command::new("mariadb")
            .arg("--no-defaults")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
                "-u",
                "root",
            ])
            .args(["--connect-timeout=2", "-N", "-B", "-e", sql])
            .output()
            .expect("the mariadb client runs")
    }

    /// A URL for `database` (no TLS: the server has no certificate).
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for MariaDbNode {
    /// Killed, as a crash would end it: nothing in it is kept. (The directory goes with
    /// `dir`, after this.)
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server binary: in /usr/sbin, which is not on every user's PATH.
fn mariadbd() -> &'static str {
    if Path::new("/usr/sbin/mariadbd").exists() {
        "/usr/sbin/mariadbd"
    } else {
        "mariadbd"
    }
}

/// `mariadbd` refuses to run as root unless told to; as root, it is told to (the files stay
/// root's, in root's temporary directory). As another user it runs as that user.
fn as_root() -> Option<&'static str> {
    std::fs::metadata("/proc/self")
        .is_ok_and(|m| m.uid() == 0)
        .then_some("--user=root")
}
