//! An etcd cluster of a test's own: members on free ports, each on a data directory of its own,
//! with fast elections (heartbeat 10 ms, election timeout 100 ms) so that a leader's loss is
//! followed within a fraction of a second. A member can be killed and started again on its data.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::scratch::TempDir;
use crate::{eventually, free_port, signal};

/// A running cluster; every member is killed when it drops, a panicking test included.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    dir: TempDir,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until they elected a leader.
    pub async fn start(size: usize) -> Self {
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            members,
            initial_cluster,
            token: uuid::Uuid::new_v4().simple().to_string(),
            dir: TempDir::new("etcd"),
        };
        for i in 0..size {
            cluster.spawn(i);
        }
        cluster.await_leader().await;
        cluster
    }

    /// Every member's client URL, for `ETCD_ENDPOINTS`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| Self::url(m.client_port))
            .collect()
    }

    fn url(port: u16) -> String {
        format!("http://127.0.0.1:{port}")
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.0.join(&self.members[i].name)
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.0.join(format!("{}.log", self.members[i].name)))
            .expect("a log file");
        let member = &self.members[i];
        let peer = Self::url(member.peer_port);
        let client = Self::url(member.client_port);
        let child = Command::new("etcd")
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts (Debian's etcd-server)");
        self.members[i].child = Some(child);
    }

    /// Kills member `i` (SIGKILL): its leases and keys live on in the others.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            signal(&child, "KILL");
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data, and waits until the cluster has a leader.
    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.await_leader().await;
    }

    /// The index of the member that leads now, asked of the living members.
    pub async fn leader(&self) -> usize {
        eventually(Duration::from_secs(30), || async {
            for member in self.members.iter().filter(|m| m.child.is_some()) {
                let Ok(mut client) = etcd_client::Client::connect(
                    [Self::url(member.client_port)],
                    Some(
                        etcd_client::ConnectOptions::new()
                            .with_connect_timeout(Duration::from_millis(300))
                            .with_timeout(Duration::from_millis(300)),
                    ),
                )
                .await
                else {
                    continue;
                };
                let Ok(status) = client.status().await else {
                    continue;
                };
                let leader = status.leader();
                if leader == 0 {
                    continue;
                }
                let members = client.member_list().await.ok()?;
                let name = members
                    .members()
                    .iter()
                    .find(|m| m.id() == leader)
                    .map(|m| m.name().to_owned())?;
                return self.members.iter().position(|m| m.name == name);
            }
            None
        })
        .await
    }

    async fn await_leader(&self) {
        self.leader().await;
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if let Some(mut child) = self.members[i].child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
