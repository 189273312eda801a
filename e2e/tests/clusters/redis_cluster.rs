//! A Redis Cluster fails a master over under load: three masters and three replicas of the
//! test's own; two instances of each service keep everything of theirs in Redis there
//! (`REDIS_CLUSTER_URLS`, `STOCK_LOCK=redis-cluster`). One hot product is sold beyond its
//! stock while steady orders go to two others; mid-load the master of the hot product's lock
//! slot is killed, and its replica takes over. Every order must be answered without a 5xx
//! (calls for the dead master's slots wait for the promotion), no cross-slot error may reach a
//! client, nothing is oversold, and invariants 1–5 hold.

use std::time::{Duration, Instant};

use shared::ids::ProductId;
use shared::keys::RedisKeys;
use testkit::redis_cluster::PrivateRedisCluster;
use testkit::{TestDatabase, TestVhost, scrape_metric};

use crate::fleet::{Databases, Fleet, Load, LoadPlan, ServiceEnv, check_invariants};

const HOT: i64 = 1;
const HOT_STOCK: i64 = 50;
const LOAD: Duration = Duration::from_secs(20);
/// When, into the load, the master is killed.
const KILL_AFTER: Duration = Duration::from_secs(6);
const GIVE_UP: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own clusters; scripts/clusters.sh runs these"]
async fn a_redis_cluster_master_failover_under_load_fails_no_request_and_oversells_nothing() {
    let began = Instant::now();
    let mut cluster = PrivateRedisCluster::start().await;
    let vhost = TestVhost::create();
    let order_db = TestDatabase::create("cluster_orders", &order_service::MIGRATOR).await;
    let inventory_db =
        TestDatabase::create("cluster_inventory", &inventory_service::MIGRATOR).await;
    let backing = |database_url: &str| {
        ServiceEnv::default()
            .with("DATABASE_URL", database_url)
            // Nothing listens on port 1: a service that ignored the cluster would find no Redis.
            .with("REDIS_URL", "redis://127.0.0.1:1/0")
            .with("REDIS_CLUSTER_URLS", cluster.urls())
            // Well above the failover (about 2.5 s here), and requests may wait as long.
            .with("REDIS_CLUSTER_WAIT_MS", "30000")
            .with("REQUEST_TIMEOUT_SECS", "60")
            .with("AMQP_URL", vhost.url.clone())
    };
    let fleet = Fleet::start(
        backing(&order_db.url),
        backing(&inventory_db.url).with("STOCK_LOCK", "redis-cluster"),
        2,
    )
    .await;
    let initial = [(HOT, HOT_STOCK), (2, 1_000_000), (3, 1_000_000)];
    fleet.create_products(&initial).await;
    // Counted from here: `/readyz` answers 503 while an instance starts.
    let every_instance: Vec<String> = fleet
        .order_bases()
        .into_iter()
        .chain(fleet.inventory_bases())
        .collect();
    let mut before = 0.0;
    for base in &every_instance {
        before += answers_5xx(base).await;
    }

    let plan = |rate, products| LoadPlan {
        rate,
        duration: LOAD,
        products,
        give_up: GIVE_UP,
    };
    let hot = Load::start(&fleet, plan(30, vec![HOT]));
    let steady = Load::start(&fleet, plan(20, vec![2, 3]));
    println!(
        "load: {LOAD:?} of 30 orders/s on product {HOT} (stock {HOT_STOCK}) and 20 orders/s on \
         products 2 and 3; the master of product {HOT}'s lock slot is killed after {KILL_AFTER:?}"
    );
    tokio::time::sleep(KILL_AFTER).await;
    // The prefix does not matter: the tag alone picks the slot.
    let hot_lock = RedisKeys::default().product_lock(ProductId(HOT));
    let victim = cluster.master_of(&hot_lock).await;
    let killed_at = Instant::now();
    cluster.kill(victim);
    let promoted = cluster.await_failover(&hot_lock, victim).await;
    println!(
        "outage: master :{victim} killed; :{promoted} serves its slots after {:.1} s",
        killed_at.elapsed().as_secs_f64()
    );
    cluster.restart(victim);

    let mut report = hot.finish().await;
    report.absorb(steady.finish().await);
    println!("load: {report}");

    let mut server_errors = -before;
    let (mut bypassed, mut acquired) = (0.0, 0.0);
    for base in &every_instance {
        server_errors += answers_5xx(base).await;
    }
    for base in fleet.inventory_bases() {
        let series = |result| {
            format!(r#"lock_acquisitions_total{{result="{result}",backend="redis-cluster"}}"#)
        };
        bypassed += scrape_metric(&base, &series("bypassed")).await;
        acquired += scrape_metric(&base, &series("acquired")).await;
    }
    println!(
        "answers: {server_errors} 5xx from every instance under load; locks: {acquired} acquisitions, \
         {bypassed} bypassed"
    );
    assert_eq!(
        server_errors, 0.0,
        "no request fails while a master fails over"
    );
    assert!(
        report.refused.keys().all(|&status| status == 409),
        "every order is answered, the hot product's beyond its stock with 409: {:?}",
        report.refused
    );
    assert!(acquired > 0.0, "the consumers locked through the cluster");

    let databases = Databases::of(&order_db, &inventory_db);
    check_invariants(&fleet, &report, &databases, &vhost.url, &initial, GIVE_UP).await;
    cluster.await_healthy().await;
    println!(
        "scenario: {:.0} s end to end",
        began.elapsed().as_secs_f64()
    );
}

/// Answers with a 5xx status the instance at `base` gave since it started, every route.
async fn answers_5xx(base: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics");
    text.lines()
        .filter(|line| line.starts_with("http_requests_total{") && line.contains("status=\"5"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
