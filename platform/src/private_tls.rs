//! TLS endpoints of a test's own, to show that the services verify what they connect to: a
//! throwaway CA with a server certificate for 127.0.0.1 (made by the `openssl` CLI), a
//! PostgreSQL cluster that takes TLS connections only, and stunnel in front of the machine's
//! RabbitMQ. The TLS Redis is [`crate::private_redis::PrivateRedis::start_tls`].

use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::testing::free_port;

/// A directory removed with this guard.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).expect("a temporary directory");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("the command starts");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA of a test's own and a server certificate it signed for `127.0.0.1`.
#[derive(Debug)]
pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    pub fn new() -> Self {
        let dir = TempDir::new("test-ca");
        let openssl = || {
            let mut command = Command::new("openssl");
            command.current_dir(&dir.0);
            command
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(openssl()
            .args(["req", "-x509", "-days", "2", "-subj", "/CN=test CA"])
            .args(ec)
            .args(["-keyout", "ca.key", "-out", "ca.pem"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]));
        run(openssl()
            .args(["req", "-subj", "/CN=127.0.0.1"])
            .args(ec)
            .args(["-keyout", "server.key", "-out", "server.csr"]));
        std::fs::write(
            dir.0.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the extensions");
        run(openssl().args([
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ]));
        Self { dir }
    }

    /// The CA's certificate, PEM: what a client trusts.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.0.join("ca.pem")
    }

    /// The server's certificate, PEM.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.0.join("server.pem")
    }

    /// The server's private key, PEM.
    pub fn key_file(&self) -> PathBuf {
        self.dir.0.join("server.key")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits until something accepts TCP connections on `port`.
fn await_port(port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status}");
        }
        assert!(Instant::now() < until, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A PostgreSQL cluster of a test's own (`initdb` in a temporary directory, a free port)
/// that accepts TLS connections only (`hostssl` in `pg_hba.conf`), with the certificate of
/// a [`TestCa`]. Stopped and deleted when dropped.
#[derive(Debug)]
pub struct PrivatePostgres {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    _dir: TempDir,
}

impl PrivatePostgres {
    pub fn start_tls(ca: &TestCa) -> Self {
        let bin = postgres_bin();
        let dir = TempDir::new("test-pg");
        let data = dir.0.join("data");
        let port = free_port();
        chown_to_postgres(&dir.0);
        run(as_postgres(&bin.join("initdb"))
            .args(["-D".as_ref(), data.as_os_str()])
            .args(["-A", "trust", "-U", "postgres"]));
        for (from, to) in [
            (ca.cert_file(), "server.pem"),
            (ca.key_file(), "server.key"),
        ] {
            let target = data.join(to);
            std::fs::copy(from, &target).expect("copy the certificate");
            chown_to_postgres(&target);
            // PostgreSQL refuses a key others can read.
            run(Command::new("chmod").arg("600").arg(&target));
        }
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\nfsync = off\n",
            dir.0.display()
        );
        append(&data.join("postgresql.conf"), &conf);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        run(as_postgres(&bin.join("pg_ctl"))
            .args(["-D".as_ref(), data.as_os_str()])
            .args(["-l".as_ref(), data.join("server.log").as_os_str()])
            .args(["-w", "start"]));
        Self {
            port,
            bin,
            data,
            _dir: dir,
        }
    }

    /// A URL for `database` with the query `params` (`sslmode=...&sslrootcert=...`).
    pub fn url(&self, database: &str, params: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?{params}",
            self.port
        )
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-D".as_ref(), self.data.as_os_str()])
            .args(["-m", "immediate", "stop"])
            .output();
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

fn chown_to_postgres(path: &Path) {
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

/// `stunnel` terminating TLS (with a [`TestCa`]'s certificate) on a free port in front of
/// `target` (`host:port`): the machine's RabbitMQ becomes an `amqps://` endpoint.
#[derive(Debug)]
pub struct Stunnel {
    pub port: u16,
    child: Child,
    _dir: TempDir,
}

impl Stunnel {
    pub fn start(ca: &TestCa, target: &str) -> Self {
        let dir = TempDir::new("test-stunnel");
        let port = free_port();
        let conf = dir.0.join("stunnel.conf");
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\n\n[tls]\naccept = 127.0.0.1:{port}\nconnect = {target}\n\
                 cert = {}\nkey = {}\n",
                ca.cert_file().display(),
                ca.key_file().display()
            ),
        )
        .expect("write stunnel.conf");
        let mut child = Command::new(stunnel_program())
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("stunnel starts (is stunnel4 installed?)");
        await_port(port, &mut child, "stunnel");
        Self {
            port,
            child,
            _dir: dir,
        }
    }
}

impl Drop for Stunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian names the binary `stunnel4`; elsewhere it is `stunnel`.
fn stunnel_program() -> &'static str {
    let found = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(name).exists()))
    };
    if found("stunnel4") {
        "stunnel4"
    } else {
        "stunnel"
    }
}
