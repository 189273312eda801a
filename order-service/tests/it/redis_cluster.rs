//! `REDIS_CLUSTER_URLS`: idempotency tokens on a Redis Cluster of the test's own (three
//! masters, three replicas). A batch's tokens fall in many slots and are claimed, recorded and
//! replayed without a cross-slot error; a master killed just before orders are placed
//! delays them until its replica took over, and fails none.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;
use shared::keys::RedisKeys;
use testkit::redis_cluster::PrivateRedisCluster;

use crate::helpers::{TestApp, order_body};

/// A call may wait this long for a slot whose master failed: well above a test cluster's
/// failover, which takes about 2.5 s alone but more than 8 s was seen on a machine busy with
/// the whole suite. Requests may take as long.
const WAIT: Duration = Duration::from_secs(30);

/// Places one order per token at once (the intake batches them), and answers each answer's
/// status and body.
async fn place_all(app: &TestApp, tokens: &[String]) -> Vec<(u16, Value)> {
    join_all(tokens.iter().enumerate().map(|(i, token)| async move {
        let body = order_body(1 + i as i64 % 7, 1 + i as i64 % 3, 1);
        let response = app.post_order(token, &body).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_on_a_redis_cluster_place_one_order_each_through_a_master_failover() {
    let mut cluster = PrivateRedisCluster::start().await;
    let settings = cluster.settings(WAIT);
    let app = TestApp::spawn_with(|c| {
        c.redis_cluster = Some(settings);
        c.request_timeout = Duration::from_secs(60);
    })
    .await;
    let keys = RedisKeys::new(app.redis_prefix.clone());

    let mut tokens = Vec::new();
    for _ in 0..60 {
        tokens.push(app.issue_token().await);
    }
    let mut masters = BTreeSet::new();
    for token in &tokens {
        let token = token.parse().expect("a token is a UUID");
        masters.insert(cluster.master_of(&keys.idempotency_token(&token)).await);
    }
    assert_eq!(masters.len(), 3, "the tokens span every master");

    let first = place_all(&app, &tokens).await;
    assert!(first.iter().all(|(status, _)| *status == 202), "{first:?}");
    // The first responses are recorded beside the claims, each in its token's slot.
    let states = format!("{}idem:*", app.redis_prefix);
    testkit::eventually(Duration::from_secs(10), || async {
        let found = cluster.keys(&states).await;
        let recorded = found.iter().filter(|k| !k.ends_with(":claim")).count();
        (recorded == tokens.len()).then_some(())
    })
    .await;
    let replayed = place_all(&app, &tokens).await;
    for ((status, body), (_, first)) in replayed.iter().zip(&first) {
        assert_eq!(*status, 202, "{body}");
        assert_eq!(body, first, "a replay answers the first response");
    }

    // A master is killed, and a batch is placed at once: the orders whose tokens are in its
    // slots wait for its replica's promotion, and none fails.
    let more: Vec<String> = join_all((0..30).map(|_| app.issue_token())).await;
    let victim = cluster
        .master_of(&keys.idempotency_token(&more[0].parse().expect("a UUID")))
        .await;
    cluster.kill(victim);
    let placed = place_all(&app, &more).await;
    assert!(
        placed.iter().all(|(status, _)| *status == 202),
        "every order is placed through the failover: {placed:?}"
    );
    let promoted = cluster
        .await_failover(
            &keys.idempotency_token(&more[0].parse().expect("a UUID")),
            victim,
        )
        .await;
    assert_ne!(promoted, victim);
    let orders = app.count("orders").await;
    assert_eq!(orders, 90, "one order per token");
    cluster.restart(victim);
}
