//! Per-client rate limits: a token bucket per client address, answering 429 `rate-limited`
//! with `Retry-After` when a client's bucket is empty (docs/contract.md §2).
//!
//! The client is the peer address of the TCP connection (axum's `ConnectInfo`); behind a
//! proxy every client shares the proxy's bucket, so limit at the proxy there instead. IPv6
//! clients are keyed by their /64, the block one subscriber usually holds, so rotating
//! addresses inside it does not buy a fresh bucket each time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shared::Problem;

/// Paths never limited: probes and scrapers must see the service even while clients are
/// being refused.
pub const EXEMPT: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Buckets kept before the idle ones are swept (the threshold then doubles with what is left).
const FIRST_SWEEP_AT: usize = 1024;

/// Clients tracked at most; past this, new clients share one bucket until a sweep frees room.
const MAX_TRACKED: usize = 100_000;

/// `RATE_LIMIT_PER_SEC` and `RATE_LIMIT_BURST`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second a client may sustain; 0 turns limiting off (the default).
    pub per_sec: u32,
    /// Requests a client may send at once after being idle; 0 or unset means `per_sec`.
    pub burst: u32,
}

impl RateLimit {
    /// Reads `RATE_LIMIT_PER_SEC` (default 0: off) and `RATE_LIMIT_BURST` (default: the
    /// same as the rate).
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            per_sec: crate::config::parsed("RATE_LIMIT_PER_SEC", 0)?,
            burst: crate::config::parsed("RATE_LIMIT_BURST", 0)?,
        })
    }

    pub fn is_on(&self) -> bool {
        self.per_sec > 0
    }

    /// The bucket size in force: `burst`, or the rate when no burst is given.
    pub fn capacity(&self) -> u32 {
        if self.burst == 0 {
            self.per_sec
        } else {
            self.burst
        }
    }
}

/// The buckets of every client seen recently.
#[derive(Debug)]
pub struct Limiter {
    rate: f64,
    capacity: f64,
    state: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    by_client: HashMap<IpAddr, Bucket>,
    /// Shared by new clients while `by_client` is full.
    overflow: Bucket,
    sweep_at: usize,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: f64, now: Instant) -> Self {
        Self {
            tokens: capacity,
            at: now,
        }
    }

    fn refill(&mut self, rate: f64, capacity: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(capacity);
        self.at = now;
    }
}

impl Limiter {
    /// A limiter, or `None` when `limit` is off.
    pub fn new(limit: RateLimit) -> Option<Arc<Self>> {
        limit.is_on().then(|| {
            let capacity = f64::from(limit.capacity());
            Arc::new(Self {
                rate: f64::from(limit.per_sec),
                capacity,
                state: Mutex::new(Buckets {
                    by_client: HashMap::new(),
                    overflow: Bucket::full(capacity, Instant::now()),
                    sweep_at: FIRST_SWEEP_AT,
                }),
            })
        })
    }

    /// Takes one token from `client`'s bucket; when it is empty, how long until one is back.
    pub fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let (rate, capacity) = (self.rate, self.capacity);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let state = &mut *state;
        let key = bucket_key(client);
        if !state.by_client.contains_key(&key) && state.by_client.len() >= state.sweep_at {
            // A bucket idle long enough to be full again is the same as no bucket: drop those.
            state.by_client.retain(|_, bucket| {
                let mut bucket = *bucket;
                bucket.refill(rate, capacity, now);
                bucket.tokens < capacity
            });
            state.sweep_at = (state.by_client.len() * 2).max(FIRST_SWEEP_AT);
        }
        let bucket = if state.by_client.len() < MAX_TRACKED || state.by_client.contains_key(&key) {
            state
                .by_client
                .entry(key)
                .or_insert_with(|| Bucket::full(capacity, now))
        } else {
            &mut state.overflow
        };
        bucket.refill(rate, capacity, now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }

    /// How many clients have a bucket now.
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.by_client.len())
            .unwrap_or_default()
    }
}

fn bucket_key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(Ipv6Addr::from(segments))
            }
        },
        v4 => v4,
    }
}

/// The middleware: limited requests get 429 before any handler runs.
pub async fn limit(
    State(limiter): State<Option<Arc<Limiter>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(limiter) = limiter else {
        return next.run(request).await;
    };
    if EXEMPT.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    // Without connection info (a router called in-process) every caller shares one bucket.
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |info| info.0.ip());
    match limiter.take(client, Instant::now()) {
        Ok(()) => next.run(request).await,
        Err(wait) => too_many_requests(wait),
    }
}

fn too_many_requests(wait: Duration) -> Response {
    // Whole seconds (RFC 9110 §10.2.3), rounded up so a client that waits is let in.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many requests",
        format!(
            "this client exceeded its request rate; retry in {} s",
            secs.max(1)
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_sec: u32, burst: u32) -> Arc<Limiter> {
        Limiter::new(RateLimit { per_sec, burst }).expect("on")
    }

    #[test]
    fn off_by_default_and_burst_defaults_to_the_rate() {
        assert!(Limiter::new(RateLimit::default()).is_none());
        assert_eq!(
            RateLimit {
                per_sec: 5,
                burst: 0
            }
            .capacity(),
            5
        );
        assert_eq!(
            RateLimit {
                per_sec: 5,
                burst: 9
            }
            .capacity(),
            9
        );
    }

    #[test]
    fn a_burst_then_one_more_is_refused_until_a_token_is_back() {
        let limiter = limiter(2, 3);
        let client = IpAddr::from([10, 0, 0, 1]);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take(client, start).is_ok());
        }
        let wait = limiter.take(client, start).expect_err("empty");
        assert_eq!(wait, Duration::from_millis(500));
        assert!(
            limiter.take(IpAddr::from([10, 0, 0, 2]), start).is_ok(),
            "others unaffected"
        );
        assert!(
            limiter
                .take(client, start + Duration::from_millis(500))
                .is_ok()
        );
        assert!(
            limiter
                .take(client, start + Duration::from_millis(500))
                .is_err()
        );
    }

    #[test]
    fn idle_buckets_are_swept_so_memory_stays_bounded() {
        let limiter = limiter(1000, 1);
        let start = Instant::now();
        for i in 0..5000u32 {
            // Each client appears once; a millisecond later its bucket is full again.
            let now = start + Duration::from_millis(u64::from(i));
            assert!(limiter.take(IpAddr::from(i.to_be_bytes()), now).is_ok());
        }
        assert!(limiter.tracked() <= FIRST_SWEEP_AT, "{}", limiter.tracked());
    }

    #[test]
    fn ipv6_clients_of_one_64_share_a_bucket() {
        let limiter = limiter(1, 1);
        let now = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        assert!(limiter.take(a, now).is_ok());
        assert!(limiter.take(b, now).is_err());
        assert_eq!(
            bucket_key("::ffff:10.0.0.1".parse().expect("ip")),
            IpAddr::from([10, 0, 0, 1])
        );
    }
}
