//! A redis-server of a test's own, on a free port: one the test can freeze (`SIGSTOP`) and
//! thaw (a Redis that stops answering without refusing connections, which the shared Redis
//! of the machine must never be made to do), or one that speaks TLS only.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::tls::TestCa;
use crate::{eventually, free_port, signal};

/// A running `redis-server --save '' --appendonly no`; thawed and killed when dropped, a
/// panicking test included.
#[derive(Debug)]
pub struct PrivateRedis {
    /// `redis://127.0.0.1:<port>/0`, or `rediss://` for a TLS server.
    pub url: String,
    child: Child,
    /// How it listens, to start it again on the same port.
    listen: Vec<String>,
    stopped: bool,
}

impl PrivateRedis {
    /// Starts the server and waits until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let server = Self::spawn(
            format!("redis://127.0.0.1:{port}/0"),
            &["--port".into(), port.to_string()],
        );
        let client = redis::Client::open(server.url.as_str()).expect("a Redis URL");
        server.await_ping(&client).await;
        server
    }

    /// Starts a server that takes TLS connections only (`rediss://`), with the certificate of
    /// `ca`, and waits until it answers a client that trusts `ca`.
    pub async fn start_tls(ca: &TestCa) -> Self {
        let port = free_port();
        let path = |p: std::path::PathBuf| p.display().to_string();
        let server = Self::spawn(
            format!("rediss://127.0.0.1:{port}/0"),
            &[
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                path(ca.cert_file()),
                "--tls-key-file".into(),
                path(ca.key_file()),
                "--tls-ca-cert-file".into(),
                path(ca.ca_file()),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
        );
        let trusted = platform::storage::tls::CaBundle::load(ca.ca_file()).expect("the test CA");
        let client = redis::Client::build_with_tls(
            server.url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(trusted.pem().as_bytes().to_vec()),
            },
        )
        .expect("a Redis URL");
        server.await_ping(&client).await;
        server
    }

    fn spawn(url: String, listen: &[String]) -> Self {
        let child = Self::start_process(listen);
        Self {
            url,
            child,
            listen: listen.to_vec(),
            stopped: false,
        }
    }

    fn start_process(listen: &[String]) -> Child {
        Command::new("redis-server")
            .args(listen)
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)")
    }

    /// Kills the server and starts it again on the same port, empty (it keeps nothing on
    /// disk), and waits until it answers: every connection to the old one is broken. A
    /// plain (not TLS) server only.
    pub async fn restart(&mut self) {
        if self.stopped {
            self.resume();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::start_process(&self.listen);
        let client = redis::Client::open(self.url.as_str()).expect("a Redis URL");
        self.await_ping(&client).await;
    }

    async fn await_ping(&self, client: &redis::Client) {
        eventually(Duration::from_secs(10), || async {
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .ok()
        })
        .await;
    }

    /// Freezes the process: connections stay open (the kernel even accepts new ones), and
    /// nothing is answered until [`PrivateRedis::resume`].
    pub fn freeze(&mut self) {
        signal(&self.child, "STOP");
        self.stopped = true;
    }

    /// Lets the process run again; it then answers what was sent while it was frozen.
    pub fn resume(&mut self) {
        signal(&self.child, "CONT");
        self.stopped = false;
    }

    /// A plain connection of the test's own (no timeouts), for checks behind the service.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the private Redis")
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if self.stopped {
            // A stopped process would not act on SIGKILL's cleanup until continued.
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
