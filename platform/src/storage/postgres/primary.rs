//! Which of the configured PostgreSQL hosts takes writes, and keeping the pool on it.
//!
//! sqlx connects to one host per pool. With a primary and its standbys listed in
//! `DATABASE_URLS`, the pool connects to the host [`Primary`] chose: the first that takes
//! writes (the same test as libpq's `target_session_attrs=read-write`: not in recovery, and
//! sessions not read-only). Every new connection is asked again before the pool hands it
//! out, so a standby, or a primary that has since become one, never gets a statement. A
//! watcher asks the chosen host every [`CHECK_EVERY`]; when it stops answering or refuses
//! writes (a server made read-only under open sessions answers them SQLSTATE 25006), the
//! hosts are asked again, the pool opens its new connections on the one that takes writes,
//! and the connections opened before are closed instead of handed out.
//!
//! A primary that comes back after its standby was promoted also says it takes writes. A
//! promotion starts a new timeline, so when several hosts take writes the one on the
//! newest timeline wins, and the list's order only breaks ties; and a host that is still
//! up is kept, however early the other is in the list.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection, PgPool};
use tokio::sync::Notify;

/// How often the watcher asks the chosen host whether it still takes writes: how long,
/// at most, the pool keeps trying a primary that went away before it looks for another.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long one host may take to connect and answer before it counts as down.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a host said when asked whether it takes writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not in recovery, sessions writable; `timeline` is the one its WAL is written on.
    Writable { timeline: u32 },
    /// A standby (in recovery), or a server whose sessions are read-only.
    ReadOnly,
}

/// Asks the server at the other end of `conn` what it is; one round trip.
pub async fn role(conn: &mut PgConnection) -> sqlx::Result<Role> {
    // pg_current_wal_lsn() fails during recovery, hence the CASE; the WAL file name
    // starts with the timeline, in hexadecimal.
    let row = sqlx::query!(
        r#"SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'
                      AS "read_only!",
                  CASE WHEN pg_is_in_recovery() THEN NULL
                       ELSE pg_walfile_name(pg_current_wal_lsn()) END AS wal_file"#,
    )
    .fetch_one(conn)
    .await?;
    let (read_only, wal_file): (bool, Option<String>) = (row.read_only, row.wal_file);
    let timeline = wal_file
        .as_deref()
        .and_then(|name| u32::from_str_radix(name.get(..8)?, 16).ok());
    Ok(match (read_only, timeline) {
        (false, Some(timeline)) => Role::Writable { timeline },
        _ => Role::ReadOnly,
    })
}

/// The host to write to, given what each answered (`None`: it did not): the writable one
/// on the newest timeline, the earliest in the list among equals.
pub fn pick(answers: &[Option<Role>]) -> Option<(usize, u32)> {
    answers
        .iter()
        .enumerate()
        .filter_map(|(index, answer)| match answer {
            Some(Role::Writable { timeline }) => Some((index, *timeline)),
            _ => None,
        })
        // max_by_key keeps the last of equals; reversing makes it the earliest.
        .rev()
        .max_by_key(|&(_, timeline)| timeline)
}

/// A connection to `options`, and what the server is, within [`ASK_TIMEOUT`]; or why not.
async fn ask(options: &PgConnectOptions) -> Result<(Role, PgConnection), String> {
    let asked = async {
        let mut conn = options.connect().await?;
        let role = role(&mut conn).await?;
        Ok::<_, sqlx::Error>((role, conn))
    };
    match tokio::time::timeout(ASK_TIMEOUT, asked).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(format!("{error:#}")),
        Err(_) => Err(format!("no answer within {ASK_TIMEOUT:?}")),
    }
}

/// Why no host was chosen: what each said, in the configured order.
#[derive(Debug)]
pub struct NoPrimary(Vec<String>);

impl std::fmt::Display for NoPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no PostgreSQL host takes writes: {}", self.0.join("; "))
    }
}

impl std::error::Error for NoPrimary {}

/// The configured hosts, which of them the pool connects to, and when that last changed.
#[derive(Debug)]
pub struct Primary {
    hosts: Vec<PgConnectOptions>,
    chosen: AtomicUsize,
    timeline: AtomicU32,
    switched_at: Mutex<Option<Instant>>,
    recheck: Notify,
}

/// A connection to the chosen host, kept by the watcher to ask it again.
#[derive(Debug)]
pub struct Found {
    pub index: usize,
    conn: PgConnection,
}

impl Primary {
    /// Asks every host in `hosts` (at once, each through `ask_on`'s options of it) and
    /// chooses the one to write to, with the connection made to ask it; or what each host
    /// said when none takes writes.
    pub async fn find(
        hosts: Vec<PgConnectOptions>,
        ask_on: Vec<PgConnectOptions>,
    ) -> (Self, Result<Found, NoPrimary>) {
        let primary = Self {
            hosts,
            chosen: AtomicUsize::new(0),
            timeline: AtomicU32::new(0),
            switched_at: Mutex::new(None),
            recheck: Notify::new(),
        };
        let found = primary.ask_all(&ask_on).await;
        (primary, found)
    }

    /// The options of the host connections go to.
    pub fn chosen(&self) -> &PgConnectOptions {
        &self.hosts[self.chosen.load(Ordering::Acquire)]
    }

    async fn ask_all(&self, hosts: &[PgConnectOptions]) -> Result<Found, NoPrimary> {
        let mut answers: Vec<_> = join_all(hosts.iter().map(ask)).await;
        let roles: Vec<Option<Role>> = answers
            .iter()
            .map(|answer| answer.as_ref().ok().map(|(role, _)| *role))
            .collect();
        let Some((index, timeline)) = pick(&roles) else {
            let said = hosts.iter().zip(&answers).map(|(host, answer)| {
                let what = match answer {
                    Ok(_) => "read-only (a standby, or sessions read-only)".to_owned(),
                    Err(error) => error.clone(),
                };
                format!("{}:{}: {what}", host.get_host(), host.get_port())
            });
            return Err(NoPrimary(said.collect()));
        };
        // Another host, or the same name on a new timeline (a failover behind one address):
        // connections opened before may talk to a server that no longer is the primary.
        let previous_timeline = self.timeline.swap(timeline, Ordering::AcqRel);
        let previous = self.chosen.swap(index, Ordering::AcqRel);
        if (previous, previous_timeline) != (index, timeline) {
            *self.switched_at.lock().expect("not poisoned") = Some(Instant::now());
        }
        let (_, conn) = std::mem::replace(&mut answers[index], Err(String::new()))
            .expect("the chosen host answered");
        Ok(Found { index, conn })
    }

    /// For `after_connect`: a fresh connection may be used only when its server takes
    /// writes on the chosen host's timeline (a connection opened to the old host while the
    /// choice changed is not). Otherwise the watcher looks again at once.
    pub async fn admit(&self, conn: &mut PgConnection) -> sqlx::Result<()> {
        let expected = self.timeline.load(Ordering::Acquire);
        match role(conn).await? {
            Role::Writable { timeline } if timeline == expected => Ok(()),
            role => {
                self.recheck.notify_one();
                Err(sqlx::Error::Protocol(format!(
                    "refusing a PostgreSQL session that is not on the primary \
                     (it is {role:?}; the primary was on timeline {expected})"
                )))
            }
        }
    }

    /// For `before_acquire`: whether an idle connection of `meta.age` was opened after the
    /// last change of primary, so it talks to the server the pool should write to.
    pub fn is_current(&self, meta: &PoolConnectionMetadata) -> bool {
        match *self.switched_at.lock().expect("not poisoned") {
            Some(at) => meta.age < at.elapsed(),
            None => true,
        }
    }

    /// Asks the chosen host every [`CHECK_EVERY`] (or at once when a new connection was
    /// refused) and moves `pool` to another host when it stops taking writes; returns when
    /// the pool is closed. `session` decorates a host's options as the pool uses them.
    pub async fn watch(
        self: Arc<Self>,
        pool: PgPool,
        mut probe: Option<Found>,
        session: impl Fn(&PgConnectOptions) -> PgConnectOptions,
    ) {
        let closed = pool.close_event();
        tokio::pin!(closed);
        loop {
            tokio::select! {
                _ = &mut closed => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
                _ = self.recheck.notified() => {}
            }
            if let Some(found) = probe.as_mut() {
                let expected = Role::Writable {
                    timeline: self.timeline.load(Ordering::Acquire),
                };
                let answer = tokio::time::timeout(ASK_TIMEOUT, role(&mut found.conn)).await;
                if matches!(answer, Ok(Ok(role)) if role == expected) {
                    continue;
                }
            }
            let before = self.chosen.load(Ordering::Acquire);
            let found = self.ask_all(&self.hosts).await;
            match &found {
                Ok(found) if found.index != before => {
                    pool.set_connect_options(session(&self.hosts[found.index]));
                    tracing::warn!(
                        host = self.hosts[found.index].get_host(),
                        port = self.hosts[found.index].get_port(),
                        "PostgreSQL primary changed: new connections go to this host"
                    );
                }
                Ok(_) => {}
                Err(none) => tracing::warn!("{none}"),
            }
            probe = found.ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Role, pick};

    const W1: Option<Role> = Some(Role::Writable { timeline: 1 });
    const W2: Option<Role> = Some(Role::Writable { timeline: 2 });
    const RO: Option<Role> = Some(Role::ReadOnly);

    #[test]
    fn the_first_writable_host_is_chosen() {
        assert_eq!(pick(&[None, RO, W1, W1]), Some((2, 1)));
    }

    #[test]
    fn a_promoted_standby_wins_over_the_primary_it_replaced() {
        assert_eq!(pick(&[W1, W2]), Some((1, 2)));
        assert_eq!(pick(&[W2, W1]), Some((0, 2)));
    }

    #[test]
    fn no_writable_host_chooses_none() {
        assert_eq!(pick(&[None, RO]), None);
        assert_eq!(pick(&[]), None);
    }
}
