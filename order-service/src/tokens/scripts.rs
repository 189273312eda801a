//! The Lua scripts that change a token's state in Redis, each atomic (never check-then-set),
//! reading and writing the states of [`super::state`]. Beside a token's state, a claim
//! leaves its claim id (random per claim) under the token's claim key for as long as a claim
//! may live, so that a claim run again recognises its own first run, and a give-back can
//! name the one claim it gives back; the state itself keeps the form every release reads.

use std::sync::LazyLock;

use redis::Script;

/// Claims the tokens of a batch, in order: the request taker's own `issued` state (or its
/// own stale claim) becomes in flight for its request; any other state is returned as it
/// is. Each token `i` has two keys, its state `KEYS[2i-1]` and its claim key `KEYS[2i]`.
/// `ARGV[1]` is the age of a stale claim (and the life of a claim id); then each token has
/// four: its request's in-flight value at `ARGV[4i-2]`, the claim id at `ARGV[4i-1]`, at
/// `ARGV[4i]` an expiry in unix ms or `''`, and at `ARGV[4i+1]` the `issued` state of the
/// request's taker. With an expiry, a token Redis does not know is claimed too, expiring then
/// (the caller has checked the token was issued here, to this taker, and is unexpired;
/// PostgreSQL's unique key settles whether it was used). Tokens are handled in order inside
/// one script, so a second request for a token in the same batch finds the first one's claim.
///
/// A claimed key lives at least as long as a claim may ([`super::store::IN_FLIGHT_TTL`]), so
/// a token whose TTL runs out while its request is in flight is still known to be in flight
/// (not unknown, which would answer a repeat 400). A token held in flight under this very
/// claim id is claimed: the first run went through and its reply was lost.
pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local in_flight_ms = tonumber(ARGV[1])
        local out = {}
        local function taker(inflight)
            return string.match(inflight, '^inflight:[^:]*@(%d+)') or ''
        end
        for i = 1, #KEYS / 2 do
            local key, claim_key = KEYS[2 * i - 1], KEYS[2 * i]
            local mine, id = ARGV[4 * i - 2], ARGV[4 * i - 1]
            local claim = mine .. ':' .. now
            local recreate_until = ARGV[4 * i]
            local issued = ARGV[4 * i + 1]
            local v = redis.call('GET', key)
            local claimed = false
            if not v then
                -- A forgotten token is claimed again only while it is alive: one that expired
                -- while its request queued is unknown, as if Redis had expired it itself.
                if recreate_until == '' or tonumber(recreate_until) <= now then
                    out[i] = ''
                else
                    local until_ms = math.max(tonumber(recreate_until), now + in_flight_ms)
                    redis.call('SET', key, claim, 'PXAT', until_ms)
                    claimed = true
                end
            elseif string.sub(v, 1, string.len(mine) + 1) == mine .. ':'
                and redis.call('GET', claim_key) == id then
                out[i] = 'claimed'
            else
                local stale = false
                if string.sub(v, 1, 9) == 'inflight:' then
                    local claimed_at = tonumber(string.match(v, ':(%d+)$'))
                    stale = claimed_at ~= nil and now - claimed_at > in_flight_ms
                        and taker(v) == taker(mine)
                end
                if v == issued or stale then
                    if redis.call('PTTL', key) < in_flight_ms then
                        redis.call('SET', key, claim, 'PX', in_flight_ms)
                    else
                        redis.call('SET', key, claim, 'KEEPTTL')
                    end
                    claimed = true
                else
                    out[i] = v
                end
            end
            if claimed then
                redis.call('SET', claim_key, id, 'PX', in_flight_ms)
                out[i] = 'claimed'
            end
        end
        return out
        ",
    )
});

/// Gives tokens back to their takers if their requests still hold them. Each token `i` has
/// its state `KEYS[2i-1]` and claim key `KEYS[2i]`, and four arguments: its request's
/// in-flight value `ARGV[4i-3]` (the state must be that followed by `:`), a claim id
/// `ARGV[4i-2]` (when not `''`, the claim key must hold it: that very claim only), the
/// taker's `issued` state `ARGV[4i-1]`, and `ARGV[4i]`, the token's own expiry in unix ms (a
/// token already past it is deleted: unused and expired, it is unknown) or `''` to keep the
/// key's expiry.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        for i = 1, #KEYS / 2 do
            local key, claim_key = KEYS[2 * i - 1], KEYS[2 * i]
            local prefix, id = ARGV[4 * i - 3] .. ':', ARGV[4 * i - 2]
            local issued, expires = ARGV[4 * i - 1], ARGV[4 * i]
            local v = redis.call('GET', key)
            if v and string.sub(v, 1, string.len(prefix)) == prefix
                and (id == '' or redis.call('GET', claim_key) == id) then
                if expires == '' then
                    redis.call('SET', key, issued, 'KEEPTTL')
                elseif tonumber(expires) <= now then
                    redis.call('DEL', key)
                else
                    redis.call('SET', key, issued, 'PXAT', expires)
                end
                redis.call('DEL', claim_key)
            end
        end
        return 0
        ",
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`CLAIM`] for `key` with the in-flight value `inflight:f` and claim `id`;
    /// answers its state.
    async fn claim(conn: &mut redis::aio::MultiplexedConnection, key: &str, id: &str) -> String {
        let states: Vec<String> = CLAIM
            .key(key)
            .key(format!("{key}:claim"))
            .arg(30_000)
            .arg("inflight:f")
            .arg(id)
            .arg("")
            .arg("issued")
            .invoke_async(conn)
            .await
            .expect("the claim runs");
        states.into_iter().next().expect("one state")
    }

    #[tokio::test]
    async fn a_claim_run_again_recognises_its_first_run_and_no_other() {
        let mut conn = redis::Client::open(testkit::redis_url())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let key = format!("{}idem:script", testkit::redis_prefix());
        redis::cmd("SET")
            .arg(&key)
            .arg("issued")
            .arg("PX")
            .arg(10_000)
            .query_async::<()>(&mut conn)
            .await
            .expect("SET");
        assert_eq!(claim(&mut conn, &key, "one").await, "claimed");
        assert_eq!(claim(&mut conn, &key, "one").await, "claimed");
        let other = claim(&mut conn, &key, "two").await;
        assert!(other.starts_with("inflight:f:"), "{other}");
    }
}
