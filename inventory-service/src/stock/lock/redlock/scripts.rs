//! The Lua scripts Redlock runs on each master: every one acts on all of a holder's keys in
//! one round trip, and only on keys that hold the holder's token.

use std::sync::LazyLock;
use std::time::Duration;

use platform::storage::redis::RedisConnection;
use redis::{RedisResult, Script};

/// `SET KEYS[i] ARGV[2] NX PX ARGV[1]` for every key, all or none: when one is busy, the keys
/// this call set are deleted again and 0 is returned. A key already holding the token counts
/// as taken (a call run again after its connection broke finds what its first run set).
static TAKE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local set = {}
        for i, key in ipairs(KEYS) do
            if redis.call('SET', key, ARGV[2], 'NX', 'PX', ARGV[1]) then
                set[#set + 1] = key
            elseif redis.call('GET', key) ~= ARGV[2] then
                for _, taken in ipairs(set) do redis.call('DEL', taken) end
                return 0
            end
        end
        return 1
        ",
    )
});

/// `SET KEYS[i] ARGV[2] NX PX ARGV[1]` for every key on its own: one 1 or 0 per key.
static TAKE_EACH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local taken = {}
        for i, key in ipairs(KEYS) do
            if redis.call('SET', key, ARGV[2], 'NX', 'PX', ARGV[1])
                or redis.call('GET', key) == ARGV[2] then
                taken[i] = 1
            else
                taken[i] = 0
            end
        end
        return taken
        ",
    )
});

/// `PEXPIRE KEYS[i] ARGV[2]` for every key that holds token `ARGV[1]`: one 1 or 0 per key
/// (each key of a batch may be held on a majority of its own).
static RENEW_EACH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local renewed = {}
        for i, key in ipairs(KEYS) do
            if redis.call('GET', key) == ARGV[1] then
                redis.call('PEXPIRE', key, ARGV[2])
                renewed[i] = 1
            else
                renewed[i] = 0
            end
        end
        return renewed
        ",
    )
});

/// Deletes every key that holds token `ARGV[1]`.
static RELEASE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local deleted = 0
        for _, key in ipairs(KEYS) do
            if redis.call('GET', key) == ARGV[1] then
                deleted = deleted + redis.call('DEL', key)
            end
        end
        return deleted
        ",
    )
});

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// [`TAKE_ALL`] on one master: whether it took every key.
pub async fn take_all(
    conn: &mut RedisConnection,
    keys: &[String],
    token: &str,
    ttl: Duration,
) -> RedisResult<bool> {
    let mut invocation = TAKE_ALL.prepare_invoke();
    invocation.arg(millis(ttl)).arg(token);
    for key in keys {
        invocation.key(key);
    }
    let taken: i64 = invocation.invoke_async(conn).await?;
    Ok(taken == 1)
}

/// [`TAKE_EACH`] on one master: which keys it took.
pub async fn take_each(
    conn: &mut RedisConnection,
    keys: &[String],
    token: &str,
    ttl: Duration,
) -> RedisResult<Vec<bool>> {
    let mut invocation = TAKE_EACH.prepare_invoke();
    invocation.arg(millis(ttl)).arg(token);
    for key in keys {
        invocation.key(key);
    }
    let taken: Vec<i64> = invocation.invoke_async(conn).await?;
    Ok(taken.into_iter().map(|t| t == 1).collect())
}

/// [`RENEW_EACH`] on one master: which keys still held the token and were renewed.
pub async fn renew_each(
    conn: &mut RedisConnection,
    keys: &[String],
    token: &str,
    ttl: Duration,
) -> RedisResult<Vec<bool>> {
    let mut invocation = RENEW_EACH.prepare_invoke();
    invocation.arg(token).arg(millis(ttl));
    for key in keys {
        invocation.key(key);
    }
    let renewed: Vec<i64> = invocation.invoke_async(conn).await?;
    Ok(renewed.into_iter().map(|r| r == 1).collect())
}

/// [`RELEASE_ALL`] on one master.
pub async fn release_all(
    conn: &mut RedisConnection,
    keys: &[String],
    token: &str,
) -> RedisResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut invocation = RELEASE_ALL.prepare_invoke();
    invocation.arg(token);
    for key in keys {
        invocation.key(key);
    }
    let _deleted: i64 = invocation.invoke_async(conn).await?;
    Ok(())
}
