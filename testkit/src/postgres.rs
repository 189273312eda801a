//! One PostgreSQL server of a test's own, from the machine's newest PostgreSQL binaries: a
//! data directory in a temporary directory, a free port, listening on 127.0.0.1 only, its
//! socket in that directory. The private clusters ([`crate::tls::PrivatePostgres`],
//! [`crate::standby::PrivateStandby`]) are built from it. Stopped and deleted when
//! dropped.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::free_port;
use crate::scratch::{TempDir, run};

/// A data directory with a port of its own; not running until [`PostgresNode::start`].
#[derive(Debug)]
pub struct PostgresNode {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    dir: TempDir,
}

impl PostgresNode {
    /// A new cluster (`initdb`, superuser `postgres`, trust) with `conf` added to
    /// `postgresql.conf` and `hba` as the whole of `pg_hba.conf`.
    pub fn init(conf: &str, hba: &str) -> Self {
        let node = Self::empty("test-pg");
        run(as_postgres(&node.bin.join("initdb"))
            .args(["-D".as_ref(), node.data.as_os_str()])
            .args(["-A", "trust", "-U", "postgres"]));
        node.configure(conf);
        std::fs::write(node.data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        node
    }

    /// A copy of the running `primary` that follows it (`pg_basebackup -R`, streaming from
    /// the physical replication slot `slot`, which it creates), with `conf` added.
    pub fn standby_of(primary: &Self, slot: &str, conf: &str) -> Self {
        let node = Self::empty("test-pg-standby");
        run(as_postgres(&node.bin.join("pg_basebackup"))
            .args(["-D".as_ref(), node.data.as_os_str()])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-X", "stream", "-R", "-C", "-S", slot]));
        node.configure(conf);
        node
    }

    fn empty(prefix: &str) -> Self {
        let dir = TempDir::new(prefix);
        chown_to_postgres(&dir.0);
        Self {
            port: free_port(),
            bin: postgres_bin(),
            data: dir.0.join("data"),
            dir,
        }
    }

    /// Appends the node's own address and `conf`; the last setting of a name wins, so
    /// this overrides what a base backup copied from its primary.
    fn configure(&self, conf: &str) {
        let own = format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\n{conf}",
            self.port,
            self.dir.0.display()
        );
        append(&self.data.join("postgresql.conf"), &own);
    }

    /// The data directory, owned by the server's user.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&self) {
        self.start_with(&[]);
    }

    /// [`PostgresNode::start`] with `env` added to the server's environment.
    pub fn start_with(&self, env: &[(&str, String)]) {
        let mut pg_ctl = self.pg_ctl();
        // `runuser` keeps the caller's environment, so the server inherits these.
        pg_ctl.envs(env.iter().map(|(name, value)| (name, value)));
        run(pg_ctl
            .args(["-l".as_ref(), self.data.join("server.log").as_os_str()])
            .args(["-w", "start"]));
    }

    /// Stops the server: `fast` ends the sessions and shuts down cleanly, `immediate`
    /// quits without a shutdown checkpoint, as a crash would.
    pub fn stop(&self, mode: &str) {
        run(self.pg_ctl().args(["-m", mode, "-w", "stop"]));
    }

    /// Ends recovery: a standby becomes a primary on a new timeline.
    pub fn promote(&self) {
        run(self.pg_ctl().args(["-w", "promote"]));
    }

    /// What `psql -Atc sql` prints, as the superuser over TCP.
    pub fn psql(&self, sql: &str) -> String {
        let output = as_postgres(&self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", "postgres", "-Atc", sql])
            .output()
            .expect("psql runs");
        assert!(
            output.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A URL for `database` with the query `params` (may be empty).
    pub fn url(&self, database: &str, params: &str) -> String {
        let query = if params.is_empty() { "" } else { "?" };
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}{query}{params}",
            self.port
        )
    }

    fn pg_ctl(&self) -> Command {
        let mut command = as_postgres(&self.bin.join("pg_ctl"));
        command.args(["-D".as_ref(), self.data.as_os_str()]);
        command
    }
}

impl Drop for PostgresNode {
    fn drop(&mut self) {
        let _ = self.pg_ctl().args(["-m", "immediate", "stop"]).output();
    }
}

/// The newest PostgreSQL server binaries on the machine.
fn postgres_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries in /usr/lib/postgresql")
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort_by_key(|bin| {
        bin.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop().expect("an initdb")
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `initdb` and the server refuse to run as root; as root, run them as `postgres`.
fn as_postgres(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Hands `path` to the server's user (when running as root).
pub fn chown_to_postgres(path: &Path) {
    if running_as_root() {
        run(Command::new("chown").arg("postgres").arg(path));
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open for appending");
    file.write_all(text.as_bytes()).expect("append");
}
