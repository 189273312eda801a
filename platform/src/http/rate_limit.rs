//! Per-client rate limits: a rate per client address (GCRA, by `governor`'s keyed limiter), answering 429 `rate-limited`
//! with `Retry-After` when a client's bucket is empty (docs/contract.md §2).
//!
//! The client is the peer address of the TCP connection (axum's `ConnectInfo`); behind a
//! proxy every client shares the proxy's bucket, so limit at the proxy there instead. IPv6
//! clients are keyed by their /64, the block one subscriber usually holds, so rotating
//! addresses inside it does not buy a fresh bucket each time.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// Paths never limited: probes and scrapers must see the service even while clients are
/// being refused.
pub const EXEMPT: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Clients tracked before the idle ones are swept (the threshold then doubles with what is left).
const FIRST_SWEEP_AT: usize = 1024;

/// Clients tracked at most: while this many are, every client shares one rate until a sweep
/// (at most once a second there) frees room, so a flood of addresses cannot grow memory
/// without bound.
const MAX_TRACKED: usize = 100_000;

/// How often a sweep may run while [`MAX_TRACKED`] clients are tracked.
const SWEEP_PAUSE: Duration = Duration::from_secs(1);

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

/// A client's limiter, GCRA by `governor`: one state per client key, plus one shared by the
/// clients that come while [`MAX_TRACKED`] are tracked.
type Clients<C> =
    RateLimiter<IpAddr, DashMapStateStore<IpAddr>, C, NoOpMiddleware<<C as Clock>::Instant>>;
type Shared<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The rate state of every client seen recently. What is kept by hand around `governor`: the
/// key (a /64 for IPv6), the bound on the clients tracked, and the 429 answer.
pub struct Limiter<C: Clock = DefaultClock> {
    clients: Clients<C>,
    /// Shared by every client while `clients` is full after a sweep.
    overflow: Shared<C>,
    clock: C,
    /// Tracked clients at which the next sweep runs (doubling with what a sweep leaves, up to
    /// `max_tracked`).
    sweep_at: AtomicUsize,
    /// Clients tracked at most ([`MAX_TRACKED`]; smaller in tests).
    max_tracked: usize,
    /// When the last sweep ran at the bound: there, sweeps run at most every [`SWEEP_PAUSE`].
    swept_at: Mutex<Option<C::Instant>>,
}

impl<C: Clock> std::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("tracked", &self.clients.len())
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// A limiter, or `None` when `limit` is off.
    pub fn new(limit: RateLimit) -> Option<Arc<Self>> {
        Self::with_clock(limit, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiter<C> {
    /// A limiter on `clock` (tests give a clock they move by hand), or `None` when `limit` is off.
    pub fn with_clock(limit: RateLimit, clock: C) -> Option<Arc<Self>> {
        let rate = NonZeroU32::new(limit.per_sec)?;
        let burst = NonZeroU32::new(limit.capacity()).unwrap_or(rate);
        let quota = Quota::per_second(rate).allow_burst(burst);
        Some(Arc::new(Self::bounded(quota, clock, MAX_TRACKED)))
    }

    fn bounded(quota: Quota, clock: C, max_tracked: usize) -> Self {
        Self {
            clients: RateLimiter::new(quota, DashMapStateStore::default(), clock.clone()),
            overflow: RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
            sweep_at: AtomicUsize::new(FIRST_SWEEP_AT.min(max_tracked)),
            max_tracked,
            swept_at: Mutex::new(None),
        }
    }

    /// Counts one request of `client`; when its rate is spent, how long until the next one is
    /// let in.
    pub fn take(&self, client: IpAddr) -> Result<(), Duration> {
        if self.clients.len() >= self.sweep_at.load(Ordering::Relaxed) && self.may_sweep() {
            // A client idle long enough to be let in at its full burst again is the same as
            // no state: drop those.
            self.clients.retain_recent();
            let left = self.clients.len();
            let next = (left * 2).clamp(FIRST_SWEEP_AT.min(self.max_tracked), self.max_tracked);
            self.sweep_at.store(next, Ordering::Relaxed);
        }
        let checked = if self.clients.len() < self.max_tracked {
            self.clients.check_key(&bucket_key(client))
        } else {
            self.overflow.check()
        };
        checked.map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Below the bound a sweep runs whenever the threshold is reached; at the bound (the
    /// threshold is capped there, so it never drifts out of reach) at most every
    /// [`SWEEP_PAUSE`], so that clients that went idle are dropped soon and the overflow rate
    /// ends, without sweeping on every request.
    fn may_sweep(&self) -> bool {
        if self.clients.len() < self.max_tracked {
            return true;
        }
        let now = self.clock.now();
        let mut swept_at = self.swept_at.lock().unwrap_or_else(|p| p.into_inner());
        let due = swept_at.is_none_or(|at| Duration::from(now.duration_since(at)) >= SWEEP_PAUSE);
        if due {
            *swept_at = Some(now);
        }
        due
    }

    /// How many clients are tracked now.
    pub fn tracked(&self) -> usize {
        self.clients.len()
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
    match limiter.take(client) {
        Ok(()) => next.run(request).await,
        Err(wait) => super::refusals::too_many_requests(wait),
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn limiter(per_sec: u32, burst: u32) -> (Arc<Limiter<FakeRelativeClock>>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        let limiter = Limiter::with_clock(RateLimit { per_sec, burst }, clock.clone()).expect("on");
        (limiter, clock)
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
        let (limiter, clock) = limiter(2, 3);
        let client = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..3 {
            assert!(limiter.take(client).is_ok());
        }
        let wait = limiter.take(client).expect_err("spent");
        assert_eq!(wait, Duration::from_millis(500));
        assert!(
            limiter.take(IpAddr::from([10, 0, 0, 2])).is_ok(),
            "others unaffected"
        );
        clock.advance(Duration::from_millis(500));
        assert!(limiter.take(client).is_ok());
        assert!(limiter.take(client).is_err());
    }

    #[test]
    fn idle_clients_are_swept_so_memory_stays_bounded() {
        let (limiter, clock) = limiter(1000, 1);
        for i in 0..5000u32 {
            // Each client appears once; a millisecond later it may burst again.
            clock.advance(Duration::from_millis(1));
            assert!(limiter.take(IpAddr::from(i.to_be_bytes())).is_ok());
        }
        assert!(limiter.tracked() <= FIRST_SWEEP_AT, "{}", limiter.tracked());
    }

    #[test]
    fn ipv6_clients_of_one_64_share_a_rate() {
        let (limiter, _clock) = limiter(1, 1);
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        assert!(limiter.take(a).is_ok());
        assert!(limiter.take(b).is_err());
        assert_eq!(
            bucket_key("::ffff:10.0.0.1".parse().expect("ip")),
            IpAddr::from([10, 0, 0, 1])
        );
    }

    #[test]
    fn at_the_bound_clients_share_one_rate_until_a_later_sweep_frees_room() {
        let clock = FakeRelativeClock::default();
        let quota = Quota::per_second(NonZeroU32::new(1000).expect("rate"));
        let limiter = Limiter::bounded(quota, clock.clone(), 100);
        for i in 0..100u32 {
            assert!(limiter.take(IpAddr::from(i.to_be_bytes())).is_ok());
        }
        assert_eq!(limiter.tracked(), 100);
        // Full: a newcomer goes to the shared rate and is not tracked.
        assert!(limiter.take(IpAddr::from([10, 9, 9, 9])).is_ok());
        assert_eq!(limiter.tracked(), 100);
        // Once the others went idle and the pause is over, a sweep frees room again.
        clock.advance(SWEEP_PAUSE);
        assert!(limiter.take(IpAddr::from([10, 9, 9, 9])).is_ok());
        assert!(limiter.tracked() < 100, "{}", limiter.tracked());
    }
}
