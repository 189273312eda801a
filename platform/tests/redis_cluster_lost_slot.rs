//! A Redis Cluster that loses a master and its replica has a slot no node serves. A call for
//! it is retried until `REDIS_CLUSTER_WAIT_MS` passed (hundreds of retries over a wait of
//! seconds) and then fails; it never brings the connection down, which serves the slot again
//! once the nodes are back.

use std::time::{Duration, Instant};

use platform::storage::redis::connect_cluster;
use redis::RedisResult;
use testkit::redis_cluster::PrivateRedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_a_slot_no_node_serves_fails_after_the_wait_and_the_connection_lives_on() {
    let mut cluster = PrivateRedisCluster::start().await;
    // Long enough for far more than the 60 retries past which a pause of `10 × 2^retry` ms
    // no longer fits in a u64.
    let wait = Duration::from_secs(20);
    let mut conn = connect_cluster(&cluster.settings(wait), Duration::from_millis(500), None)
        .expect("a cluster connection");
    let key = "lost-slot:key";
    let set: RedisResult<()> = redis::cmd("SET")
        .arg(key)
        .arg("1")
        .query_async(&mut conn)
        .await;
    set.expect("a cluster that serves every slot");

    let master = cluster.master_of(key).await;
    let replicas = cluster.replicas_of(master).await;
    assert!(!replicas.is_empty(), "the master at {master} has a replica");
    for port in replicas.iter().chain([&master]) {
        cluster.kill(*port);
    }
    let asked = Instant::now();
    let lost: RedisResult<Option<String>> = redis::cmd("GET").arg(key).query_async(&mut conn).await;
    assert!(lost.is_err(), "no node serves the slot: {lost:?}");
    // The call was retried for the whole wait, not given up after its first tries (a lower
    // bound: how much longer it took is the machine's business).
    assert!(
        asked.elapsed() >= wait - Duration::from_secs(1),
        "given up after {:?}",
        asked.elapsed()
    );

    for port in replicas.iter().chain([&master]) {
        cluster.restart(*port);
    }
    cluster.await_healthy().await;
    // The nodes came back empty (they keep nothing on disk); the same connection writes and
    // reads the slot again.
    testkit::eventually(Duration::from_secs(60), || {
        let mut conn = conn.clone();
        async move {
            redis::cmd("SET")
                .arg(key)
                .arg("2")
                .query_async::<()>(&mut conn)
                .await
                .ok()
        }
    })
    .await;
    let again: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("the slot is served again");
    assert_eq!(again.as_deref(), Some("2"));
}
