//! One Redis key held under one random token, and the Lua scripts that only act while the
//! key still holds that token.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};

/// Deletes `KEYS[1]` only while it still holds our token `ARGV[1]`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('DEL', KEYS[1])
        end
        return 0
        ",
    )
});

/// Sets `KEYS[1]` to expire in `ARGV[2]` ms only while it still holds our token `ARGV[1]`.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            return redis.call('PEXPIRE', KEYS[1], ARGV[2])
        end
        return 0
        ",
    )
});

/// One Redis key, wanted or held under one random token. The primitive under
/// [`super::Locker`];
/// public so tests can play a second client that does not own the key.
#[derive(Debug, Clone)]
pub struct Lease {
    key: String,
    token: String,
    /// How many local holders in a row this key was handed to (see [`super::local`]).
    hand_overs: u32,
}

impl Lease {
    /// A lease on `key` with a fresh random token.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            token: uuid::Uuid::new_v4().to_string(),
            hand_overs: 0,
        }
    }

    pub(super) fn hand_overs(&self) -> u32 {
        self.hand_overs
    }

    /// The same lease, counted as handed to one more holder.
    pub(super) fn handed_over(mut self) -> Self {
        self.hand_overs += 1;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// `SET key token NX PX ttl`: `true` when this lease now holds the key.
    pub async fn try_acquire(
        &self,
        conn: &mut ConnectionManager,
        ttl: Duration,
    ) -> RedisResult<bool> {
        let reply: Option<String> = redis::cmd("SET")
            .arg(&self.key)
            .arg(&self.token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .query_async(conn)
            .await?;
        Ok(reply.is_some())
    }

    /// Extends the key's expiry to `ttl` from now; `false` when the key is gone or not ours.
    pub async fn renew(&self, conn: &mut ConnectionManager, ttl: Duration) -> RedisResult<bool> {
        let renewed: i64 = RENEW
            .key(&self.key)
            .arg(&self.token)
            .arg(millis(ttl))
            .invoke_async(conn)
            .await?;
        Ok(renewed == 1)
    }

    /// Deletes the key; `false` when it was gone or not ours (then nothing is deleted).
    pub async fn release(&self, conn: &mut ConnectionManager) -> RedisResult<bool> {
        let deleted: i64 = RELEASE
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(conn)
            .await?;
        Ok(deleted == 1)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Best effort: a lock that cannot be released expires by itself.
pub(super) async fn release_all(conn: &mut ConnectionManager, leases: &[Lease]) {
    for lease in leases.iter().rev() {
        if let Err(error) = lease.release(conn).await {
            tracing::debug!(%error, key = lease.key(), "could not release a stock lock; it will expire");
        }
    }
}

/// [`release_all`] without waiting for it: for a caller that must not wait on a Redis that
/// stopped answering. Sent on the same connection, the deletes queue behind whatever was
/// sent before them, so a hung Redis that wakes up runs them after the `SET`s they undo.
pub(super) fn release_in_background(conn: &ConnectionManager, leases: Vec<Lease>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if leases.is_empty() {
        return;
    }
    let mut conn = conn.clone();
    runtime.spawn(async move { release_all(&mut conn, &leases).await });
}
