//! TLS endpoints of a test's own, to show that the services verify what they connect to: a
//! throwaway CA with a server certificate for 127.0.0.1 (made by the `openssl` CLI), a
//! PostgreSQL cluster that takes TLS connections only, and stunnel in front of the machine's
//! RabbitMQ. The TLS Redis is [`crate::private_redis::PrivateRedis::start_tls`].

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::private_postgres::{PostgresNode, chown_to_postgres};
use crate::testing::free_port;

/// A directory removed with this guard.
#[derive(Debug)]
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(prefix: &str) -> Self {
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

pub(crate) fn run(command: &mut Command) {
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
    node: PostgresNode,
}

impl PrivatePostgres {
    pub fn start_tls(ca: &TestCa) -> Self {
        let node = PostgresNode::init(
            "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n",
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        );
        for (from, to) in [
            (ca.cert_file(), "server.pem"),
            (ca.key_file(), "server.key"),
        ] {
            let target = node.data().join(to);
            std::fs::copy(from, &target).expect("copy the certificate");
            chown_to_postgres(&target);
            // PostgreSQL refuses a key others can read.
            run(Command::new("chmod").arg("600").arg(&target));
        }
        node.start();
        Self {
            port: node.port,
            node,
        }
    }

    /// A URL for `database` with the query `params` (`sslmode=...&sslrootcert=...`).
    pub fn url(&self, database: &str, params: &str) -> String {
        self.node.url(database, params)
    }
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
