//! The token store against the real Redis: a claim keeps its token known while its request
//! may be in flight, even past the token's TTL, and giving a token back restores the
//! token's own expiry (an unused token past it is unknown again).

use std::time::Duration;

use order_service::tokens::signed::{TokenSecret, TokenSigner};
use order_service::tokens::store::{Claim, ClaimRequest, Held, TokenStore};
use platform::storage::redis::health::RedisHealth;
use shared::keys::RedisKeys;
use uuid::Uuid;

struct Store {
    tokens: TokenStore,
    keys: RedisKeys,
}

fn store(ttl: Duration) -> Store {
    let redis =
        platform::storage::redis::connect(&testkit::redis_url()).expect("a Redis connection");
    let keys = RedisKeys::new(testkit::redis_prefix());
    let signer = TokenSigner::new(TokenSecret::generate());
    Store {
        tokens: TokenStore::new(redis, keys.clone(), ttl, signer, RedisHealth::default()),
        keys,
    }
}

impl Store {
    async fn claim(&self, token: Uuid) -> Claim {
        let request = ClaimRequest {
            token: &token,
            fingerprint: "f",
            recreate_until: self.tokens.live_expiry(&token, None),
            taker: None,
        };
        let mut claims = self.tokens.claim_all(&[request]).await.expect("claimed");
        claims.remove(0)
    }

    async fn give_back(&self, token: Uuid) {
        let held = Held {
            token: &token,
            fingerprint: "f",
            taker: None,
        };
        self.tokens.release_all(&[held]).await.expect("released");
    }

    /// The key's time to live in ms (-2: no key).
    async fn pttl(&self, token: Uuid) -> i64 {
        let mut conn = redis::Client::open(testkit::redis_url())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        redis::cmd("PTTL")
            .arg(self.keys.idempotency_token(&token))
            .query_async(&mut conn)
            .await
            .expect("PTTL")
    }
}

#[tokio::test]
async fn a_token_whose_ttl_runs_out_while_its_request_is_in_flight_is_still_in_flight() {
    let store = store(Duration::from_millis(700));
    let (token, _) = store.tokens.issue(None).await.expect("issued");
    assert_eq!(store.claim(token).await, Claim::Claimed);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        store.claim(token).await,
        Claim::InFlight {
            fingerprint: "f".into(),
            taker: None,
        },
        "a repeat is told the first request is in flight, not that the token is unknown"
    );
    // Given back past its expiry, the unused token is unknown, as if it had never been
    // claimed.
    store.give_back(token).await;
    assert_eq!(store.pttl(token).await, -2);
    assert_eq!(store.claim(token).await, Claim::Unknown);
}

#[tokio::test]
async fn a_token_given_back_before_its_expiry_keeps_that_expiry() {
    let ttl = Duration::from_secs(5);
    let store = store(ttl);
    let (token, _) = store.tokens.issue(None).await.expect("issued");
    assert_eq!(store.claim(token).await, Claim::Claimed);
    let in_flight = store.pttl(token).await;
    assert!(
        in_flight > 5_000,
        "kept for a claim's whole life: {in_flight} ms"
    );
    store.give_back(token).await;
    let given_back = store.pttl(token).await;
    assert!(
        (1..=5_000).contains(&given_back),
        "the token's own expiry again: {given_back} ms"
    );
    assert_eq!(store.claim(token).await, Claim::Claimed);
}
