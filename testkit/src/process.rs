//! Child processes of a test: the service binaries set up for this test, killed with their guard,
//! signalled, expected to refuse a start, or drained after a SIGTERM.

use crate::{eventually, redis_prefix, redis_url, wait_until_ok};

use std::process::Command;
use std::time::Duration;

/// An `AMQP_URL` nothing listens on (port 1): the service's broker stays down.
pub const NO_BROKER: &str = "amqp://guest:guest@127.0.0.1:1/%2f";

/// A service binary set up to start against this test's database, vhost and Redis key
/// prefix, quietly (logs at `error`, output discarded). Add `HTTP_ADDR` and anything else,
/// then spawn it.
pub fn service_command(
    binary: &str,
    database_url: &str,
    amqp_url: &str,
    redis_prefix: &str,
) -> Command {
    let mut command = Command::new(binary);
    command
        .env("DATABASE_URL", database_url)
        .env("REDIS_URL", redis_url())
        .env("REDIS_KEY_PREFIX", redis_prefix)
        .env("AMQP_URL", amqp_url)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// [`service_command`] with a Redis key prefix of its own, listening on `127.0.0.1:port`.
pub fn service_command_on(port: u16, binary: &str, database_url: &str, amqp_url: &str) -> Command {
    let mut command = service_command(binary, database_url, amqp_url, &redis_prefix());
    command.env("HTTP_ADDR", format!("127.0.0.1:{port}"));
    command
}

/// A child process that is killed when this guard drops, so a failing test leaves no service
/// running behind it.
#[derive(Debug)]
pub struct KilledOnDrop(pub std::process::Child);

impl std::ops::Deref for KilledOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // A stopped process dies of SIGKILL too; `kill` fails harmlessly if it already exited.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (a [`service_command`] with one bad setting added) and expects it to
/// refuse to start: returns what it wrote to stderr once it exited with a failure. Panics if
/// it exits 0, or is still running after 20 s (the setting was accepted and it serves).
pub fn expect_refused_start(mut command: Command) -> String {
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the binary");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the binary") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("the service started with a setting it should have refused");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).ok();
    }
    assert!(
        !status.success(),
        "exit status {status:?}; stderr: {stderr}"
    );
    stderr
}

/// Sends the signal `name` (`TERM`, `STOP`, `CONT`, …) to `child`.
pub fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name}");
}

/// A port that was free a moment ago (bound and let go), for a binary that must keep its
/// address across a restart: one the kernel picks, or, when `TEST_PORT_RANGE` (`first-last`)
/// is set, the next free one of that range, so test runs sharing a machine can be given
/// ranges that never meet.
pub fn free_port() -> u16 {
    let Some((first, last)) = platform::config::optional("TEST_PORT_RANGE").and_then(|range| {
        let (first, last) = range.split_once('-')?;
        Some((
            first.trim().parse::<u16>().ok()?,
            last.trim().parse::<u16>().ok()?,
        ))
    }) else {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        return probe.local_addr().expect("its address").port();
    };
    // Handed out in turn: two calls before either port is bound must not get the same one.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let size = u32::from(last.saturating_sub(first)) + 1;
    (0..size)
        .map(|_| first + (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % size) as u16)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port in TEST_PORT_RANGE")
}

/// Waits up to `deadline` for `child` to exit and returns how it exited; fails the test if it
/// still runs then.
pub async fn exit_status(
    child: &mut std::process::Child,
    deadline: std::time::Duration,
) -> std::process::ExitStatus {
    eventually(deadline, || {
        std::future::ready(child.try_wait().expect("wait for the binary"))
    })
    .await
}

/// A service process that got SIGTERM and drains: out of the load balancer, still running.
#[derive(Debug)]
pub struct Draining {
    pub child: KilledOnDrop,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub client: reqwest::Client,
}

impl Draining {
    /// Spawns `command` (a [`service_command_on`] `port`, with `SHUTDOWN_DRAIN_SECS` set), waits
    /// until `/readyz` answers 200, sends SIGTERM, and waits (10 s) until `/readyz` answers the
    /// 503 `not-ready` problem whose detail is "shutting down".
    pub async fn after_sigterm(mut command: Command, port: u16) -> Self {
        let child = KilledOnDrop(command.spawn().expect("start the binary"));
        let base = format!("http://127.0.0.1:{port}");
        wait_until_ok(&format!("{base}/readyz")).await;
        signal(&child, "TERM");
        let client = reqwest::Client::new();
        let problem = eventually(Duration::from_secs(10), || async {
            let response = client.get(format!("{base}/readyz")).send().await.ok()?;
            let status = response.status().as_u16();
            let body = response.json::<serde_json::Value>().await.ok()?;
            (status == 503).then_some(body)
        })
        .await;
        assert_eq!(problem["type"], "/problems/not-ready");
        assert_eq!(problem["detail"], "shutting down");
        Self {
            child,
            base,
            client,
        }
    }

    /// `path` on the draining process.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Asserts the process has not exited yet.
    pub fn assert_still_running(&mut self) {
        assert!(
            self.child.try_wait().expect("wait").is_none(),
            "still running"
        );
    }
}
