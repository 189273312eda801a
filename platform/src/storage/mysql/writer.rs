//! Which of the configured MySQL servers takes writes, and keeping the pool on it: the
//! MySQL counterpart of PostgreSQL's [`crate::storage::postgres::primary`].
//!
//! sqlx connects to one server per pool. With a primary and its replicas listed in
//! `DATABASE_URLS`, the pool connects to the server [`Writer`] chose: the first whose
//! `@@global.read_only` is off (replicas run with it on). The variable is read rather than
//! trusted to refuse writes: an account with `READ ONLY ADMIN` (MariaDB; its root has it, as
//! part of ALL PRIVILEGES) or `SUPER` / `CONNECTION_ADMIN` (MySQL, unless `super_read_only`)
//! writes on a read-only server, so a pool that waited for its writes to fail would go on
//! writing to a demoted primary, and those rows would be lost to the promoted replica.
//!
//! Every new connection is asked before the pool hands it out, so a replica, or a primary
//! that has since become one, never gets a statement; nor does any server but the chosen
//! one, told by its identity ([`Server`]): a connection the pool began opening to the server
//! it has just left can reach it after the switch, and that server may take writes again. A watcher asks the chosen server every
//! [`CHECK_EVERY`] over a connection of its own; when it stops answering or turns read-only,
//! the connections opened before are closed instead of handed out, every server is asked
//! again, and the pool opens its new connections on the first that takes writes.
//!
//! MySQL has no timeline to tell a promoted replica from the primary it replaced: an old
//! primary that comes back writable says what the new one says. So the chosen server is
//! kept for as long as it answers and takes writes, however early another is in the list;
//! the list's order only decides when the chosen one is gone. That is the guard against a
//! split brain: an old primary that comes back writable never takes the pool back from the
//! replica promoted in its place.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::pool::PoolConnectionMetadata;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use tokio::sync::Notify;

use super::server::{ASK_TIMEOUT, ask};
pub use super::server::{Server, identify, takes_writes};

/// How often the watcher asks the chosen server whether it still takes writes: how long, at
/// most, the pool keeps writing to a primary that was made read-only or went away before it
/// looks for another.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The least time between two rounds of asking every server: a pool whose new connections
/// keep being refused (sqlx retries them within milliseconds) wakes the watcher each time.
const ROUNDS_APART: Duration = Duration::from_millis(200);

/// Why no server was chosen: what each said, in the configured order.
#[derive(Debug)]
pub struct NoWriter(Vec<String>);

impl std::fmt::Display for NoWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no MySQL server of DATABASE_URLS takes writes: {}",
            self.0.join("; ")
        )
    }
}

impl std::error::Error for NoWriter {}

/// The configured servers, and since when the pool's older connections may talk to a
/// server that no longer takes writes.
#[derive(Debug)]
pub struct Writer {
    /// Each server's options as the pool connects to it (to the service's database).
    servers: Vec<MySqlConnectOptions>,
    /// The same servers, to no database in particular: asking needs none, and the
    /// service's may not exist yet.
    ask_on: Vec<MySqlConnectOptions>,
    /// The server the pool writes to: the only one a new connection is admitted to.
    chosen: Mutex<Option<Server>>,
    /// Set when a new connection reached a writable server that is not the chosen one (a
    /// DNS name moved, a server renamed): the watcher then asks every server again rather
    /// than trust its probe, whose connection may still reach the chosen server.
    stranger: AtomicBool,
    retired_at: Mutex<Option<Instant>>,
    recheck: Notify,
}

/// The chosen server, and the connection made to ask it, kept by the watcher to ask again.
#[derive(Debug)]
pub struct Found {
    pub index: usize,
    server: Server,
    conn: MySqlConnection,
}

impl Writer {
    /// Asks every server of `urls` (at once, to no database in particular) and chooses the
    /// first that takes writes; or what each said when none does. Fails on an unreadable URL.
    pub async fn find(urls: &[String]) -> anyhow::Result<(Self, Result<Found, NoWriter>)> {
        let servers = urls
            .iter()
            .map(|url| super::connect_options(url))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let ask_on = urls
            .iter()
            .map(|url| super::connect_options(&super::without_database(url)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let writer = Self {
            servers,
            ask_on,
            chosen: Mutex::new(None),
            stranger: AtomicBool::new(false),
            retired_at: Mutex::new(None),
            recheck: Notify::new(),
        };
        let found = writer.ask_all(None).await;
        if let Ok(found) = &found {
            writer.choose(&found.server);
        }
        Ok((writer, found))
    }

    /// `options` with this writer's hooks: each new session set up for `flavor` and then
    /// admitted ([`Writer::admit`]), each idle one handed out only if it is current
    /// ([`Writer::is_current`]).
    pub fn hooks(
        self: &Arc<Self>,
        options: MySqlPoolOptions,
        flavor: super::Flavor,
    ) -> MySqlPoolOptions {
        let (admit, current) = (self.clone(), self.clone());
        options
            .after_connect(move |conn, _| {
                let admit = admit.clone();
                Box::pin(async move {
                    super::prepare_session(conn, flavor).await?;
                    admit.admit(conn).await
                })
            })
            .before_acquire(move |_, meta| {
                let current = current.is_current(&meta);
                Box::pin(async move { Ok(current) })
            })
    }

    /// The options the pool connects to server `index` with.
    pub fn server(&self, index: usize) -> &MySqlConnectOptions {
        &self.servers[index]
    }

    /// Asks every server; chooses `keep` if it takes writes (a server that still does is
    /// never left for one earlier in the list: the split-brain guard), else the first that
    /// does.
    async fn ask_all(&self, keep: Option<usize>) -> Result<Found, NoWriter> {
        let mut answers: Vec<_> = join_all(self.ask_on.iter().map(ask)).await;
        let writable = |index: &usize| matches!(answers[*index], Ok((true, _, _)));
        let Some(index) = keep
            .filter(writable)
            .or_else(|| (0..answers.len()).find(writable))
        else {
            let said = self.ask_on.iter().zip(&answers).map(|(server, answer)| {
                let what = match answer {
                    Ok(_) => "read-only".to_owned(),
                    Err(error) => error.clone(),
                };
                format!("{}:{}: {what}", server.get_host(), server.get_port())
            });
            return Err(NoWriter(said.collect()));
        };
        let (_, server, conn) = std::mem::replace(&mut answers[index], Err(String::new()))
            .expect("the chosen server answered");
        // The others' sessions end cleanly rather than as aborted connections.
        for (_, _, other) in answers.into_iter().flatten() {
            tokio::spawn(other.close());
        }
        Ok(Found {
            index,
            server,
            conn,
        })
    }

    /// For `after_connect`, last: a fresh connection may be used only when it reached the
    /// chosen server, that server takes writes, and no retirement happened while it was
    /// asked. A connection opened before a switch can reach the server just left after it,
    /// and that server may take writes again: only its identity tells. Otherwise the watcher
    /// looks again.
    pub async fn admit(&self, conn: &mut MySqlConnection) -> sqlx::Result<()> {
        let asked_at = Instant::now();
        let (writable, server) = identify(conn).await?;
        let chosen = self.is_chosen(&server);
        if writable && chosen && !self.retired_since(asked_at) {
            return Ok(());
        }
        if writable && !chosen {
            self.stranger.store(true, Ordering::Relaxed);
        }
        self.recheck.notify_one();
        let why = if writable {
            "it is not the server the pool writes to"
        } else {
            "it is read-only (@@global.read_only is on)"
        };
        Err(sqlx::Error::Protocol(format!(
            "refusing a MySQL session on {}:{}: {why}",
            server.hostname, server.port
        )))
    }

    fn choose(&self, server: &Server) {
        *self.chosen.lock().expect("not poisoned") = Some(server.clone());
    }

    fn is_chosen(&self, server: &Server) -> bool {
        self.chosen.lock().expect("not poisoned").as_ref() == Some(server)
    }

    /// For `before_acquire`: whether an idle connection of `meta.age` was opened after the
    /// chosen server last stopped taking writes, so it talks to the server the pool should
    /// write to.
    pub fn is_current(&self, meta: &PoolConnectionMetadata) -> bool {
        match *self.retired_at.lock().expect("not poisoned") {
            Some(at) => meta.age < at.elapsed(),
            None => true,
        }
    }

    /// Whether a retirement happened at or after `instant`.
    fn retired_since(&self, instant: Instant) -> bool {
        self.retired_at
            .lock()
            .expect("not poisoned")
            .is_some_and(|at| at >= instant)
    }

    /// From now on, the connections opened so far are closed instead of handed out.
    fn retire_connections(&self) {
        *self.retired_at.lock().expect("not poisoned") = Some(Instant::now());
    }

    /// Asks the chosen server every [`CHECK_EVERY`] (or at once when a new connection was
    /// refused) and moves `pool` to another server when it stops taking writes; returns
    /// when the pool is closed.
    pub async fn watch(self: Arc<Self>, pool: MySqlPool, found: Found) {
        let closed = pool.close_event();
        tokio::pin!(closed);
        let mut chosen = found.index;
        let mut probe = Some(found.conn);
        let mut none_takes_writes = false;
        loop {
            tokio::select! {
                _ = &mut closed => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
                _ = self.recheck.notified() => {}
            }
            let stranger = self.stranger.swap(false, Ordering::Relaxed);
            if let Some(conn) = probe.as_mut().filter(|_| !stranger) {
                let answer = tokio::time::timeout(ASK_TIMEOUT, takes_writes(conn)).await;
                if matches!(answer, Ok(Ok(true))) {
                    continue;
                }
            }
            let found = self.ask_all(Some(chosen)).await;
            match &found {
                // A blip of the probe's connection: the chosen server still takes writes.
                // (The same URL may reach another server now, as a DNS name moved to a
                // promoted replica does: that is a switch like any other.)
                Ok(found) if found.index == chosen && self.is_chosen(&found.server) => {
                    none_takes_writes = false;
                }
                Ok(found) => {
                    none_takes_writes = false;
                    // The new server first: from now on a connection to the old one is
                    // refused, whenever it was opened. Then the new options: a connection
                    // opened after the retirement below goes to the new server.
                    self.choose(&found.server);
                    pool.set_connect_options(self.servers[found.index].clone());
                    self.retire_connections();
                    chosen = found.index;
                    let server = &self.servers[chosen];
                    tracing::warn!(
                        host = server.get_host(),
                        port = server.get_port(),
                        "MySQL server taking writes changed: new connections go to this server"
                    );
                }
                // Mid-switchover (the old primary read-only, no replica promoted yet): the
                // old sessions would still write, as privileged accounts ignore read_only.
                Err(none) => {
                    self.retire_connections();
                    if !std::mem::replace(&mut none_takes_writes, true) {
                        tracing::warn!("{none}");
                    }
                }
            }
            probe = found.ok().map(|found| found.conn);
            tokio::time::sleep(ROUNDS_APART).await;
        }
    }
}
