//! A RabbitMQ cluster of a test's own, from the installed `rabbitmq-server`: nodes on ports of
//! the test's choosing, data and logs under a temporary directory, one Erlang cookie, and an
//! `epmd` of its own, so nothing of the machine's broker (its node name, cookie, ports, the
//! management plugin's port 15672, its `epmd`) is touched. A test can stop a node and start it
//! again; everything is stopped and deleted when the cluster drops.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::eventually;

/// Where the package puts its scripts; `/usr/sbin/rabbitmqctl` would switch to the
/// `rabbitmq` user and so to the machine broker's cookie.
const SCRIPTS: &str = "/usr/lib/rabbitmq/bin";

/// A running cluster. Ports from `base_port`: `epmd` on `base_port`, node `n` (from 0) takes
/// AMQP on `base_port + 1 + n` and Erlang distribution on `base_port + 11 + n`, and the CLI
/// tools take `base_port + 50 ..= base_port + 99`. So a cluster needs 100 ports; below the
/// kernel's ephemeral range, so that no free port chosen elsewhere and no client's source port
/// takes one of them before its node binds it.
#[derive(Debug)]
pub struct PrivateRabbitCluster {
    dir: PathBuf,
    base_port: u16,
    nodes: Vec<Option<Child>>,
    epmd: Child,
}

/// A quorum queue's replicas, as `rabbitmqctl list_queues name leader members` tells.
#[derive(Debug, Clone)]
pub struct QueueReplicas {
    pub name: String,
    pub leader: String,
    pub members: Vec<String>,
}

impl PrivateRabbitCluster {
    /// Starts `size` nodes (at most 10), joins every other node to the first, and waits until
    /// the cluster reports all of them running.
    pub async fn start(size: usize, base_port: u16) -> Self {
        assert!((1..=10).contains(&size), "1 to 10 nodes");
        let dir = std::env::temp_dir().join(format!(
            "rabbitmq-cluster-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("the cluster's directory");
        // One cookie for every node and the CLI tools: what makes them one cluster.
        let cookie = home.join(".erlang.cookie");
        std::fs::write(&cookie, uuid::Uuid::new_v4().simple().to_string()).expect("a cookie");
        set_mode(&cookie, 0o400);
        // No plugins: the management plugin would fight the machine's broker for port 15672.
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("the plugins file");
        // Read instead of /etc/rabbitmq/rabbitmq-env.conf, which names the machine's node.
        std::fs::write(dir.join("rabbitmq-env.conf"), "").expect("the env file");
        let epmd = Command::new("epmd")
            .args(["-port", &base_port.to_string(), "-address", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("epmd starts (is erlang installed?)");
        let mut cluster = Self {
            dir,
            base_port,
            nodes: (0..size).map(|_| None).collect(),
            epmd,
        };
        await_epmd(base_port).await;
        for node in 0..size {
            cluster.spawn_node(node);
        }
        for node in 0..size {
            cluster.await_boot(node).await;
        }
        let seed = cluster.node_name(0);
        for node in 1..size {
            cluster.ctl(node, &["stop_app"]).await;
            cluster.ctl(node, &["join_cluster", &seed]).await;
            cluster.ctl(node, &["start_app"]).await;
        }
        let running = cluster.running_nodes().await;
        assert_eq!(
            running.len(),
            size,
            "every node runs in the cluster: {running:?}"
        );
        cluster
    }

    /// `rabbit-ci-<n+1>@localhost`.
    pub fn node_name(&self, node: usize) -> String {
        format!("rabbit-ci-{}@localhost", node + 1)
    }

    fn amqp_port(&self, node: usize) -> u16 {
        self.base_port + 1 + node as u16
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f` of every node, in node order.
    pub fn amqp_urls(&self) -> Vec<String> {
        (0..self.nodes.len())
            .map(|node| format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port(node)))
            .collect()
    }

    fn node_dir(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{}", node + 1))
    }

    fn spawn_node(&mut self, node: usize) {
        let dir = self.node_dir(node);
        std::fs::create_dir_all(&dir).expect("the node's directory");
        let port = self.amqp_port(node);
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .expect("the node's config");
        let out = std::fs::File::create(dir.join("console.log")).expect("the node's console log");
        let mut command = Command::new(Path::new(SCRIPTS).join("rabbitmq-server"));
        self.environment(&mut command);
        let child = command
            .env("RABBITMQ_NODENAME", self.node_name(node))
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env(
                "RABBITMQ_DIST_PORT",
                (self.base_port + 11 + node as u16).to_string(),
            )
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
            .stdout(out.try_clone().expect("the console log again"))
            .stderr(out)
            .spawn()
            .expect("rabbitmq-server starts (is it installed?)");
        self.nodes[node] = Some(child);
    }

    /// Waits until `node` has booted, as its console says. Not by polling its AMQP port:
    /// if it lies in the ephemeral range, a connect polled while nothing listens can
    /// be given the port itself as its source and connect to itself, taking the port from the
    /// node about to listen there.
    async fn await_boot(&mut self, node: usize) {
        let console = self.node_dir(node).join("console.log");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let printed = std::fs::read_to_string(&console).unwrap_or_default();
            if printed.contains("Starting broker... completed") {
                return;
            }
            let child = self.nodes[node].as_mut().expect("the node was started");
            let exited = child.try_wait().expect("wait for the node");
            assert!(
                exited.is_none() && tokio::time::Instant::now() < deadline,
                "node {} did not boot ({exited:?}); its console: {}",
                node + 1,
                console.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What the server and the CLI tools share: the cookie (through `HOME`), `epmd`, the
    /// plugins, the ports the CLI may use, and distribution on loopback only.
    fn environment(&self, command: &mut Command) {
        command
            .env("HOME", self.dir.join("home"))
            .env("ERL_EPMD_PORT", self.base_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_FLAGS", "-kernel inet_dist_use_interface {127,0,0,1}")
            .env("RABBITMQ_CONF_ENV_FILE", self.dir.join("rabbitmq-env.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.dir.join("enabled_plugins"),
            )
            .env(
                "RABBITMQ_CTL_DIST_PORT_MIN",
                (self.base_port + 50).to_string(),
            )
            .env(
                "RABBITMQ_CTL_DIST_PORT_MAX",
                (self.base_port + 99).to_string(),
            );
    }

    /// Runs `rabbitmqctl -n <node> <args>` and returns what it printed; panics if it fails.
    pub async fn ctl(&self, node: usize, args: &[&str]) -> String {
        self.cli("rabbitmqctl", node, args).await
    }

    /// [`PrivateRabbitCluster::ctl`] on the first node that runs: for questions to the cluster.
    pub async fn ctl_on_any(&self, args: &[&str]) -> String {
        self.ctl(self.live_node(), args).await
    }

    /// Runs `rabbitmq-queues -n <node> <args>` (`quorum_status <queue>`, …) and returns what it
    /// printed; panics if it fails.
    pub async fn queues(&self, node: usize, args: &[&str]) -> String {
        self.cli("rabbitmq-queues", node, args).await
    }

    async fn cli(&self, tool: &str, node: usize, args: &[&str]) -> String {
        let mut command = Command::new(Path::new(SCRIPTS).join(tool));
        self.environment(&mut command);
        command.args(["-q", "-n", &self.node_name(node)]).args(args);
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .expect("the CLI tool runs");
        assert!(
            output.status.success(),
            "{tool} {args:?} on node {}: {}{}",
            node + 1,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A node that runs, to ask the cluster through.
    fn live_node(&self) -> usize {
        self.nodes
            .iter()
            .position(Option::is_some)
            .expect("a node of the cluster runs")
    }

    /// The names of the nodes the cluster reports running.
    pub async fn running_nodes(&self) -> Vec<String> {
        let status = self
            .ctl_on_any(&["cluster_status", "--formatter", "json"])
            .await;
        let status: serde_json::Value = serde_json::from_str(&status).expect("cluster_status JSON");
        status["running_nodes"]
            .as_array()
            .expect("running_nodes")
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect()
    }

    /// Each queue of the default vhost with its leader and members.
    pub async fn queue_replicas(&self) -> Vec<QueueReplicas> {
        let listed = self
            .ctl_on_any(&[
                "list_queues",
                "name",
                "leader",
                "members",
                "--formatter",
                "json",
            ])
            .await;
        let listed: Vec<serde_json::Value> =
            serde_json::from_str(&listed).expect("list_queues JSON");
        listed
            .iter()
            .map(|queue| QueueReplicas {
                name: queue["name"].as_str().unwrap_or_default().to_owned(),
                leader: queue["leader"].as_str().unwrap_or_default().to_owned(),
                members: queue["members"]
                    .as_array()
                    .map(|members| {
                        members
                            .iter()
                            .filter_map(|m| m.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// For each client connection the cluster holds, the node (from 0) it is connected to.
    pub async fn client_connections(&self) -> Vec<usize> {
        let listed = self
            .ctl_on_any(&["list_connections", "name", "--formatter", "json"])
            .await;
        let listed: Vec<serde_json::Value> =
            serde_json::from_str(&listed).expect("list_connections JSON");
        // A connection's name is `<client address> -> <node's address>`.
        listed
            .iter()
            .filter_map(|connection| {
                let (_, server) = connection["name"].as_str()?.split_once(" -> ")?;
                let port: u16 = server.rsplit_once(':')?.1.parse().ok()?;
                (0..self.nodes.len()).find(|&node| self.amqp_port(node) == port)
            })
            .collect()
    }

    /// Stops `node` the way an operator does (`rabbitmqctl stop`: the Erlang VM exits) and
    /// waits until its process is gone.
    pub async fn stop_node(&mut self, node: usize) {
        self.ctl(node, &["stop"]).await;
        let mut child = self.nodes[node].take().expect("the node runs");
        eventually(Duration::from_secs(60), || {
            std::future::ready(child.try_wait().expect("wait for the node").map(drop))
        })
        .await;
    }

    /// Starts a stopped `node` again with its data; it rejoins the cluster by itself. Waits
    /// until the cluster reports it running.
    pub async fn start_node(&mut self, node: usize) {
        assert!(self.nodes[node].is_none(), "node {} runs already", node + 1);
        self.spawn_node(node);
        self.await_boot(node).await;
        let name = self.node_name(node);
        eventually(Duration::from_secs(60), || async {
            self.running_nodes().await.contains(&name).then_some(())
        })
        .await;
    }
}

impl Drop for PrivateRabbitCluster {
    fn drop(&mut self) {
        // SIGTERM is a clean stop for the Erlang VM; SIGKILL whatever is still up after that.
        for child in self.nodes.iter().flatten() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for child in self.nodes.iter_mut().flatten() {
            while std::time::Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.epmd.kill();
        let _ = self.epmd.wait();
        if std::thread::panicking() {
            eprintln!(
                "the RabbitMQ cluster's data and logs are kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Waits until `epmd` accepts connections on `127.0.0.1:port`. It binds within milliseconds;
/// the pause between attempts keeps a connect from ever meeting itself, should the port lie
/// in the ephemeral range (one polled while nothing listens can be the client's own source
/// port).
async fn await_epmd(port: u16) {
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
    }
    panic!("epmd does not listen on port {port}");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
