//! A redis-server of a test's own, on a free port, that the test can freeze (`SIGSTOP`)
//! and thaw: a Redis that stops answering without refusing connections, which the shared
//! Redis of the machine must never be made to do.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::testing::{eventually, free_port, signal};

/// A running `redis-server --save '' --appendonly no`; thawed and killed when dropped, a
/// panicking test included.
#[derive(Debug)]
pub struct PrivateRedis {
    /// `redis://127.0.0.1:<port>/0`.
    pub url: String,
    child: Child,
    stopped: bool,
}

impl PrivateRedis {
    /// Starts the server and waits until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)");
        let server = Self {
            url: format!("redis://127.0.0.1:{port}/0"),
            child,
            stopped: false,
        };
        let client = redis::Client::open(server.url.as_str()).expect("a Redis URL");
        eventually(Duration::from_secs(10), || async {
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .ok()
        })
        .await;
        server
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
