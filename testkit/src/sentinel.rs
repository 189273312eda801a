//! A Redis Sentinel deployment of a test's own: a primary, one replica and three
//! `redis-server --sentinel` processes on ports of a range the test gives, plain or TLS only,
//! with data and config files in a temporary directory of its own, so a test can kill the
//! primary and watch the Sentinels promote the replica (which the shared Redis of the machine
//! must never see).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::eventually;
use crate::tls::TestCa;
use platform::storage::redis::Sentinels;

/// The name the Sentinels monitor the primary under.
pub const MASTER: &str = "private";

/// How long the Sentinels wait for a silent primary before they call it down. Small, so a
/// test's failover takes a few seconds.
const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// How long a starting deployment, or a failover, may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running primary, replica and three Sentinels; every process is killed and the
/// directory removed when dropped, a panicking test included.
#[derive(Debug)]
pub struct PrivateSentinel {
    /// The data nodes, the first one the primary at start.
    nodes: Vec<Process>,
    sentinels: Vec<Process>,
    dir: PathBuf,
    /// With TLS only: the server's certificate, key and CA files, and the CA's PEM.
    tls: Option<Tls>,
}

#[derive(Debug)]
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    ca_pem: Vec<u8>,
}

#[derive(Debug)]
struct Process {
    port: u16,
    child: Option<Child>,
}

impl Process {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl PrivateSentinel {
    /// Starts the five processes (primary, replica, Sentinels) on the first five ports of
    /// `ports` that are free (a port can be another program's, even an outgoing connection's
    /// local port), and waits until the replica is in sync and every Sentinel knows the
    /// replica and the two other Sentinels (until then a failover could not be agreed).
    pub async fn start(ports: std::ops::Range<u16>) -> Self {
        Self::start_with(ports, None).await
    }

    /// [`PrivateSentinel::start`], every process (Sentinels included) speaking TLS only with
    /// `ca`'s server certificate, replication too: what `rediss://` with `REDIS_CA_FILE` meets.
    pub async fn start_tls(ports: std::ops::Range<u16>, ca: &TestCa) -> Self {
        let tls = Tls {
            cert: ca.cert_file(),
            key: ca.key_file(),
            ca: ca.ca_file(),
            ca_pem: std::fs::read(ca.ca_file()).expect("the test CA"),
        };
        Self::start_with(ports, Some(tls)).await
    }

    async fn start_with(ports: std::ops::Range<u16>, tls: Option<Tls>) -> Self {
        let range = ports.clone();
        let ports: Vec<u16> = ports
            .filter(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
            .take(5)
            .collect();
        assert_eq!(ports.len(), 5, "fewer than five free ports in {range:?}");
        let dir = std::env::temp_dir().join(format!("private-sentinel-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut deployment = Self {
            nodes: Vec::new(),
            sentinels: Vec::new(),
            dir,
            tls,
        };
        let primary = ports[0];
        deployment.nodes.push(deployment.data_node(primary, None));
        deployment
            .nodes
            .push(deployment.data_node(ports[1], Some(primary)));
        for &port in &ports[2..] {
            let sentinel = deployment.sentinel(port, primary);
            deployment.sentinels.push(sentinel);
        }
        deployment.await_ready(ports[1]).await;
        deployment
    }

    fn data_node(&self, port: u16, replica_of: Option<u16>) -> Process {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("a node directory");
        let mut command = Command::new("redis-server");
        let listen = self.listen(port);
        for line in listen.lines() {
            let (name, value) = line.split_once(' ').expect("a directive and its value");
            command.args([format!("--{name}"), value.to_owned()]);
        }
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            // The replica's first sync starts at once instead of after 5 s.
            .args(["--repl-diskless-sync-delay", "0"]);
        if let Some(primary) = replica_of {
            command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        spawn(port, command)
    }

    fn sentinel(&self, port: u16, primary: u16) -> Process {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("a Sentinel directory");
        // A Sentinel rewrites its config file as it learns the deployment: each needs its own.
        let file = dir.join("sentinel.conf");
        let down_after = DOWN_AFTER.as_millis();
        std::fs::write(
            &file,
            format!(
                "{listen}bind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} {down_after}\n\
                 sentinel failover-timeout {MASTER} 3000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                listen = self.listen(port),
                dir = dir.display()
            ),
        )
        .expect("a Sentinel config file");
        let mut command = Command::new("redis-server");
        command.arg(&file).arg("--sentinel");
        spawn(port, command)
    }

    /// Config lines that make a process listen on `port`: plain, or TLS only (replication and
    /// the Sentinels' own connections included).
    fn listen(&self, port: u16) -> String {
        match &self.tls {
            None => format!("port {port}\n"),
            Some(tls) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
                tls.cert.display(),
                tls.key.display(),
                tls.ca.display()
            ),
        }
    }

    /// A client of the test's own for the process on `port`.
    fn client(&self, port: u16) -> redis::Client {
        match &self.tls {
            None => redis::Client::open(Self::url(port)),
            Some(tls) => redis::Client::build_with_tls(
                format!("rediss://127.0.0.1:{port}/0"),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(tls.ca_pem.clone()),
                },
            ),
        }
        .expect("a Redis URL")
    }

    /// One command to the process on `port`; `None` when it cannot be sent or fails.
    async fn query<T: redis::FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> Option<T> {
        let mut conn = self
            .client(port)
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        cmd.query_async(&mut conn).await.ok()
    }

    async fn await_ready(&self, replica: u16) {
        eventually(PATIENCE, || async {
            let info: String = self
                .query(replica, redis::cmd("INFO").arg("replication"))
                .await?;
            info.contains("master_link_status:up").then_some(())
        })
        .await;
        for sentinel in &self.sentinels {
            eventually(PATIENCE, || async {
                let fields: Vec<String> = self
                    .query(
                        sentinel.port,
                        redis::cmd("SENTINEL").arg("master").arg(MASTER),
                    )
                    .await?;
                let field = |name: &str| {
                    let at = fields.iter().position(|f| f == name)?;
                    fields.get(at + 1).cloned()
                };
                (field("num-slaves")? == "1" && field("num-other-sentinels")? == "2").then_some(())
            })
            .await;
        }
    }

    /// What the services are given: the Sentinels and the master's name.
    pub fn sentinels(&self) -> Sentinels {
        Sentinels {
            addresses: self
                .sentinels
                .iter()
                .map(|s| ("127.0.0.1".to_owned(), s.port))
                .collect(),
            master: MASTER.to_owned(),
        }
    }

    /// `REDIS_SENTINELS` for these Sentinels.
    pub fn sentinels_env(&self) -> String {
        self.sentinels()
            .addresses
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `redis://127.0.0.1:<port>/0`, for `REDIS_URL` (the Sentinels supply the host and port)
    /// and for a test's own look at one node.
    pub fn url(port: u16) -> String {
        format!("redis://127.0.0.1:{port}/0")
    }

    /// The port of the node the Sentinels name as primary now.
    pub async fn primary_port(&self) -> u16 {
        eventually(PATIENCE, || async {
            for sentinel in &self.sentinels {
                let named: Option<(String, u16)> = self
                    .query(
                        sentinel.port,
                        redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(MASTER),
                    )
                    .await;
                if let Some((_, port)) = named {
                    return Some(port);
                }
            }
            None
        })
        .await
    }

    /// Kills (`SIGKILL`) the primary the Sentinels name now, and returns its port.
    pub async fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port().await;
        self.nodes
            .iter_mut()
            .find(|node| node.port == port)
            .expect("the primary is one of the data nodes")
            .kill();
        port
    }

    /// Waits until the Sentinels name a node other than `old` and that node answers as a
    /// primary; returns its port.
    pub async fn await_failover(&self, old: u16) -> u16 {
        eventually(PATIENCE, || async {
            let port = self.primary_port().await;
            if port == old {
                return None;
            }
            let role: Vec<redis::Value> = self.query(port, &redis::cmd("ROLE")).await?;
            matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
                .then_some(port)
        })
        .await
    }

    /// Has the Sentinels fail over while the primary still runs: it is demoted to a replica
    /// of the one promoted (as after a network partition, or an operator's switch).
    pub async fn force_failover(&self) {
        let sentinel = self.sentinels[0].port;
        eventually(PATIENCE, || async {
            let ok: String = self
                .query(sentinel, redis::cmd("SENTINEL").arg("failover").arg(MASTER))
                .await?;
            (ok == "OK").then_some(())
        })
        .await;
    }

    /// The keys matching `pattern` on the node at `port` (`KEYS`: the deployment is a
    /// test's own and small).
    pub async fn keys(&self, port: u16, pattern: &str) -> Vec<String> {
        let mut node = self.node(port).await;
        redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut node)
            .await
            .expect("KEYS on a data node")
    }

    /// Deletes `keys` on the node at `port`.
    pub async fn delete(&self, port: u16, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let mut node = self.node(port).await;
        redis::cmd("DEL")
            .arg(keys)
            .query_async::<()>(&mut node)
            .await
            .expect("DEL on a data node");
    }

    /// A plain connection of the test's own to one node, for checks behind the services.
    pub async fn node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        self.client(port)
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to a data node")
    }
}

impl Drop for PrivateSentinel {
    fn drop(&mut self) {
        for process in self.sentinels.iter_mut().chain(self.nodes.iter_mut()) {
            process.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(port: u16, mut command: Command) -> Process {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts (is it installed?)");
    Process {
        port,
        child: Some(child),
    }
}
