//! One Redis key held under one random token, and the Lua scripts that only act while the
//! key still holds that token.

use std::sync::LazyLock;
use std::time::Duration;

use platform::storage::redis::RedisConnection;
use redis::{RedisResult, Script};

/// Gives up `KEYS[1]` only while it still holds our token `ARGV[1]`: to the waiter another
/// process registered in `KEYS[2]` (for `ARGV[2]` ms, until it confirms), or else deletes it.
/// Handing it over directly is what stops the releasing process from taking it straight back
/// with its next `SET` before the waiter's next try.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            local waiter = redis.call('GET', KEYS[2])
            if waiter then
                redis.call('SET', KEYS[1], waiter, 'PX', ARGV[2])
                redis.call('DEL', KEYS[2])
                return 2
            end
            return redis.call('DEL', KEYS[1])
        end
        return 0
        ",
    )
});

/// Takes `KEYS[1]` for token `ARGV[1]` for `ARGV[2]` ms: free, or handed to us by the last
/// holder. Busy: registers us in `KEYS[2]` as the next owner (for `ARGV[3]` ms, renewed at
/// every try) unless another waiter is registered there already. 1 when taken.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
        if not taken and redis.call('GET', KEYS[1]) == ARGV[1] then
            taken = redis.call('PEXPIRE', KEYS[1], ARGV[2])
        end
        local waiter = redis.call('GET', KEYS[2])
        if taken then
            if waiter == ARGV[1] then redis.call('DEL', KEYS[2]) end
            return 1
        end
        if not waiter or waiter == ARGV[1] then
            redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
        end
        return 0
        ",
    )
});

/// A waiter that gives up: unregisters, and frees the key if it was handed to it meanwhile.
static GIVE_UP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
        if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
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
/// [`super::RedisLock`];
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

    /// The key where a waiter of another process registers (see [`ACQUIRE`]).
    fn waiter_key(&self) -> String {
        waiter_key(&self.key)
    }

    /// One try at the key (`SET NX PX ttl`, or find it handed to us); when it is busy, this
    /// lease is registered as the next owner unless another waiter is. `true` when held.
    pub async fn try_acquire(
        &self,
        conn: &mut RedisConnection,
        ttl: Duration,
    ) -> RedisResult<bool> {
        let taken: i64 = ACQUIRE
            .key(&self.key)
            .key(self.waiter_key())
            .arg(&self.token)
            .arg(millis(ttl))
            .arg(millis(WAITER_TTL))
            .invoke_async(conn)
            .await?;
        Ok(taken == 1)
    }

    /// Stops waiting: unregisters, and frees the key if it was handed over meanwhile.
    pub async fn give_up(&self, conn: &mut RedisConnection) -> RedisResult<()> {
        let _: i64 = GIVE_UP
            .key(&self.key)
            .key(self.waiter_key())
            .arg(&self.token)
            .invoke_async(conn)
            .await?;
        Ok(())
    }

    /// Extends the key's expiry to `ttl` from now; `false` when the key is gone or not ours.
    pub async fn renew(&self, conn: &mut RedisConnection, ttl: Duration) -> RedisResult<bool> {
        let renewed: i64 = RENEW
            .key(&self.key)
            .arg(&self.token)
            .arg(millis(ttl))
            .invoke_async(conn)
            .await?;
        Ok(renewed == 1)
    }

    /// Deletes the key, or hands it to a waiter of another process; `false` when it was gone
    /// or not ours (then nothing changes).
    pub async fn release(&self, conn: &mut RedisConnection) -> RedisResult<bool> {
        let released: i64 = RELEASE
            .key(&self.key)
            .key(self.waiter_key())
            .arg(&self.token)
            .arg(millis(WAITER_TTL))
            .invoke_async(conn)
            .await?;
        Ok(released >= 1)
    }
}

/// How long a waiter's registration, and a key handed to it, last without the waiter's next
/// try: several of its tries apart (they are at most `BACKOFF_CAP` apart), and short, so a
/// waiter that went away blocks nobody for long.
pub const WAITER_TTL: Duration = Duration::from_millis(250);

/// Where a waiter of another process registers for `key`.
pub fn waiter_key(key: &str) -> String {
    format!("{key}:next")
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Best effort: a lock that cannot be released expires by itself.
pub(super) async fn release_all(conn: &mut RedisConnection, leases: &[Lease]) {
    for lease in leases.iter().rev() {
        if let Err(error) = lease.release(conn).await {
            tracing::debug!(%error, key = lease.key(), "could not release a stock lock; it will expire");
        }
    }
}

/// [`release_all`] without waiting for it: for a caller that must not wait on a Redis that
/// stopped answering. Sent on the same connection, the deletes queue behind whatever was
/// sent before them, so a hung Redis that wakes up runs them after the `SET`s they undo.
pub(super) fn release_in_background(conn: &RedisConnection, leases: Vec<Lease>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if leases.is_empty() {
        return;
    }
    let mut conn = conn.clone();
    runtime.spawn(async move { release_all(&mut conn, &leases).await });
}
