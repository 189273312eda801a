//! The RabbitMQ connection (the topology it declares is [`super::topology`]).
//!
//! A supervisor task owns the connection: it connects with capped exponential backoff and
//! jitter, declares the whole topology, publishes the live connection through a `watch`
//! channel, and starts over when the connection dies. Relay and consumers wait on that
//! channel, so a broker restart needs no service restart.
//!
//! Given the nodes of a cluster (`AMQP_URLS`), it walks them: a node that cannot be reached
//! hands over to the next at once, and only a full round of failures waits out a backoff; a
//! lost connection is picked up again starting from the node after the one that was lost,
//! since that one is most likely the node that just went away. (lapin takes one URI.)
//!
//! Both services declare the *whole* topology (all exchanges, queues and bindings), with the
//! same arguments: an order taken while inventory-service has never run still lands in a
//! durable queue instead of bouncing as unroutable.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::retry::backoff;
use crate::storage::tls::CaBundle;
use lapin::tcp::OwnedTLSConfig;
use lapin::{Connection, ConnectionProperties};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A handle on the supervised broker connection. Cheap to clone; [`Broker::supervise`]
/// must run (in the service's task tracker) for it ever to connect.
#[derive(Clone)]
pub struct Broker {
    nodes: Arc<[String]>,
    ca: Option<CaBundle>,
    current: Arc<watch::Sender<Option<Arc<Connection>>>>,
    up: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("up", &*self.up.borrow())
            .finish()
    }
}

impl Broker {
    /// One broker at `url`. An `amqps://` URL is verified against the system's roots plus
    /// `ca` when given.
    pub fn new(url: &str, ca: Option<CaBundle>) -> Self {
        Self::cluster(&[url.to_owned()], ca)
    }

    /// The nodes of one cluster, tried in turn (see the module's doc). Panics on an empty list:
    /// configuration refuses one before a broker is made.
    pub fn cluster(nodes: &[String], ca: Option<CaBundle>) -> Self {
        assert!(!nodes.is_empty(), "a broker needs at least one node");
        Self {
            nodes: Arc::from(nodes),
            ca,
            current: Arc::new(watch::channel(None).0),
            up: Arc::new(watch::channel(false).0),
        }
    }

    /// `true` while connected; for readiness probes.
    pub fn up(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// Waits for a live connection; `None` once `shutdown` fires first.
    pub async fn connection(&self, shutdown: &CancellationToken) -> Option<Arc<Connection>> {
        let mut current = self.current.subscribe();
        loop {
            if let Some(conn) = current.borrow_and_update().clone()
                && conn.status().connected()
            {
                return Some(conn);
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                changed = current.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    /// Keeps a connection open until `shutdown`: connects with backoff, declares the
    /// topology, publishes the connection, and starts over whenever it dies.
    pub async fn supervise(self, shutdown: CancellationToken) {
        let mut node = 0usize;
        let mut failures_this_round = 0usize;
        let mut failed_rounds = 0u32;
        while !shutdown.is_cancelled() {
            let index = node % self.nodes.len();
            node += 1;
            let attempt = async {
                let conn = self.connect(&self.nodes[index]).await?;
                let channel = conn.create_channel().await?;
                super::topology::declare_topology(&channel).await?;
                channel.close(200, "topology declared".into()).await.ok();
                Ok::<_, lapin::Error>(conn)
            };
            let conn = tokio::select! {
                () = shutdown.cancelled() => break,
                result = tokio::time::timeout(CONNECT_TIMEOUT, attempt) => result,
            };
            let at = NodeName(&self.nodes[index]);
            match conn {
                Ok(Ok(conn)) => {
                    failures_this_round = 0;
                    failed_rounds = 0;
                    tracing::info!(node = %at, "connected to RabbitMQ");
                    self.hold(Arc::new(conn), &shutdown).await;
                }
                failed => {
                    let error = match failed {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("no connection within {CONNECT_TIMEOUT:?}"),
                    };
                    failures_this_round += 1;
                    if failures_this_round < self.nodes.len() {
                        tracing::warn!(%error, node = %at, "cannot reach this RabbitMQ node; trying the next");
                        continue;
                    }
                    failures_this_round = 0;
                    failed_rounds += 1;
                    let delay = backoff(
                        failed_rounds,
                        Duration::from_millis(100),
                        Duration::from_secs(5),
                    );
                    tracing::warn!(%error, node = %at, retry_in_ms = delay.as_millis() as u64, "cannot reach RabbitMQ");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    async fn connect(&self, url: &str) -> lapin::Result<Connection> {
        let tls = OwnedTLSConfig {
            identity: None,
            cert_chain: self.ca.as_ref().map(|ca| ca.pem().to_owned()),
        };
        Connection::connect_with_config(
            url,
            ConnectionProperties::default(),
            tls,
            lapin::runtime::default_runtime()?,
        )
        .await
    }

    /// Publishes `conn` until it fails or shutdown comes, then withdraws it.
    async fn hold(&self, conn: Arc<Connection>, shutdown: &CancellationToken) {
        let mut events = conn.events_listener();
        self.current.send_replace(Some(conn.clone()));
        self.up.send_replace(true);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                event = events.next() => match event {
                    // lapin reports a channel's error here too (a channel the broker closed
                    // with a soft error): the connection, and every other channel on it, is
                    // fine then, and that channel's own loop replaces it.
                    Some(lapin::Event::Error(error)) if conn.status().connected() => {
                        tracing::info!(%error, "a RabbitMQ channel failed; the connection stays");
                    }
                    Some(lapin::Event::Error(error)) => {
                        tracing::warn!(%error, "RabbitMQ connection lost");
                        break;
                    }
                    None => break,
                    Some(_) => {}
                },
                // Belt and braces: some failures only show in the status.
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if !conn.status().connected() {
                        tracing::warn!("RabbitMQ connection is no longer open");
                        break;
                    }
                }
            }
        }
        self.up.send_replace(false);
        self.current.send_replace(None);
        if shutdown.is_cancelled() {
            // Consumers cancel their subscriptions on the same signal; let them finish first.
            tokio::time::sleep(Duration::from_millis(200)).await;
            conn.close(200, "shutting down".into()).await.ok();
        }
    }
}

/// How long one node may take to accept a connection and the topology. A node that hangs
/// (paused, or cut off by a partition) would otherwise hold the walk to the next one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's `host:port` for the logs; the URL itself carries the password.
struct NodeName<'a>(&'a str);

impl std::fmt::Display for NodeName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.parse::<lapin::uri::AMQPUri>() {
            Ok(uri) => write!(f, "{}:{}", uri.authority.host, uri.authority.port),
            Err(_) => f.write_str("?"),
        }
    }
}
