//! A Redis Cluster of a test's own: three masters and three replicas (`redis-server
//! --cluster-enabled yes`, joined by `redis-cli --cluster create`) on free ports, with their
//! data and cluster files in a temporary directory, so a test can kill a master and watch its
//! replica take its slots over (which the shared Redis of the machine must never see).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use platform::storage::redis::{RedisCluster, slot};

use crate::{eventually, free_port};

/// How long a node waits for a silent peer before the cluster calls it failed: small, so a
/// test's failover takes a few seconds.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long a starting cluster, or a failover, may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// The six nodes; every process is killed and the directory removed when dropped, a
/// panicking test included.
#[derive(Debug)]
pub struct PrivateRedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

#[derive(Debug)]
struct Node {
    port: u16,
    /// The cluster bus's port (`cluster-port`), chosen free too.
    bus: u16,
    child: Option<Child>,
}

impl PrivateRedisCluster {
    /// Starts six nodes, makes them a cluster of three masters with one replica each, and
    /// waits until every node sees the cluster `ok` and every replica is in sync.
    pub async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("private-cluster-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..6 {
            let node = cluster.start_node().await;
            cluster.nodes.push(node);
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("redis-cli runs");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        cluster.await_healthy().await;
        cluster
    }

    /// A node on free ports, answering as itself. A port handed out free can be bound by
    /// another test's server before this node binds it: the node then exits (or another
    /// server answers there), and it is started again on other ports.
    async fn start_node(&self) -> Node {
        for _ in 0..5 {
            let (port, bus) = (free_port(), free_port());
            let mut child = self.spawn(port, bus);
            let dir = self.dir.join(port.to_string()).display().to_string();
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while tokio::time::Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                let answer: Option<Vec<String>> =
                    query(port, redis::cmd("CONFIG").arg("GET").arg("dir")).await;
                if answer.as_deref().and_then(|a| a.get(1)) == Some(&dir) {
                    return Node {
                        port,
                        bus,
                        child: Some(child),
                    };
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("no redis-server came up as a cluster node on free ports in five tries");
    }

    fn spawn(&self, port: u16, bus: u16) -> Child {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("a node directory");
        Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--cluster-port", &bus.to_string()])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args([
                "--cluster-node-timeout",
                &NODE_TIMEOUT.as_millis().to_string(),
            ])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            // A replica's first sync starts at once instead of after 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed?)")
    }

    /// Until every running node answers `cluster_state:ok` and each of the three masters has
    /// a replica in sync (until then a failover could not happen).
    pub async fn await_healthy(&self) {
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            eventually(PATIENCE, || async {
                let info: String = query(node.port, redis::cmd("CLUSTER").arg("INFO")).await?;
                info.contains("cluster_state:ok").then_some(())
            })
            .await;
        }
        eventually(PATIENCE, || async {
            let mut synced = 0;
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                let info: String = query(node.port, redis::cmd("INFO").arg("replication")).await?;
                if info.contains("role:slave") && info.contains("master_link_status:up") {
                    synced += 1;
                }
            }
            (synced == 3).then_some(())
        })
        .await;
    }

    /// `REDIS_CLUSTER_URLS`: every node, as a service is given them.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The settings a service reads from `REDIS_CLUSTER_URLS`, waiting up to `wait` a call.
    pub fn settings(&self, wait: Duration) -> RedisCluster {
        RedisCluster {
            seeds: self
                .nodes
                .iter()
                .map(|n| format!("redis://127.0.0.1:{}", n.port))
                .collect(),
            wait,
        }
    }

    /// The port of the master that serves `key`'s slot now, as a running node sees it.
    pub async fn master_of(&self, key: &str) -> u16 {
        let slot = i64::from(slot(key.as_bytes()));
        eventually(PATIENCE, || async {
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                let Some(ranges) =
                    query::<Vec<redis::Value>>(node.port, redis::cmd("CLUSTER").arg("SLOTS")).await
                else {
                    continue;
                };
                for range in ranges {
                    let redis::Value::Array(fields) = range else {
                        continue;
                    };
                    let number = |v: &redis::Value| match v {
                        redis::Value::Int(n) => Some(*n),
                        _ => None,
                    };
                    let (Some(first), Some(last)) = (number(&fields[0]), number(&fields[1])) else {
                        continue;
                    };
                    if (first..=last).contains(&slot)
                        && let Some(redis::Value::Array(master)) = fields.get(2)
                        && let Some(port) = master.get(1).and_then(number)
                    {
                        return u16::try_from(port).ok();
                    }
                }
            }
            None
        })
        .await
    }

    /// The ports of the running nodes that replicate the master at `master` (`ROLE`).
    pub async fn replicas_of(&self, master: u16) -> Vec<u16> {
        let mut replicas = Vec::new();
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            let role: Option<Vec<redis::Value>> = query(node.port, &redis::cmd("ROLE")).await;
            if let Some(
                [
                    redis::Value::BulkString(role),
                    _,
                    redis::Value::Int(port),
                    ..,
                ],
            ) = role.as_deref()
                && role == b"slave"
                && *port == i64::from(master)
            {
                replicas.push(node.port);
            }
        }
        replicas
    }

    /// Kills (`SIGKILL`) the node at `port`.
    pub fn kill(&mut self, port: u16) {
        let node = self.node_mut(port);
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node at `port` again, with its cluster file: it rejoins, as a replica of
    /// whichever node took its slots over.
    pub fn restart(&mut self, port: u16) {
        let bus = self.node_mut(port).bus;
        let child = self.spawn(port, bus);
        self.node_mut(port).child = Some(child);
    }

    /// Waits until a node other than `dead` serves `key`'s slot as its master and the
    /// cluster is `ok` again; returns that node's port.
    pub async fn await_failover(&self, key: &str, dead: u16) -> u16 {
        eventually(PATIENCE, || async {
            let port = self.master_of(key).await;
            if port == dead {
                return None;
            }
            let info: String = query(port, redis::cmd("CLUSTER").arg("INFO")).await?;
            info.contains("cluster_state:ok").then_some(port)
        })
        .await
    }

    /// The keys matching `pattern` on every running master (`KEYS`: the cluster is a test's
    /// own and small).
    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            let role: Option<Vec<redis::Value>> = query(node.port, &redis::cmd("ROLE")).await;
            let master = matches!(
                role.as_deref().and_then(<[_]>::first),
                Some(redis::Value::BulkString(r)) if r == b"master"
            );
            if master
                && let Some(found) =
                    query::<Vec<String>>(node.port, redis::cmd("KEYS").arg(pattern)).await
            {
                keys.extend(found);
            }
        }
        keys
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }
}

impl Drop for PrivateRedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One command to the node at `port` alone; `None` when it cannot be sent or fails.
async fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).ok()?;
    let mut conn = tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()?;
    tokio::time::timeout(Duration::from_secs(2), cmd.query_async(&mut conn))
        .await
        .ok()?
        .ok()
}
