//! Both services' databases on a PostgreSQL primary with a synchronous standby, two
//! instances of each service under steady load; mid-load the primary stops as in a crash
//! (`pg_ctl stop -m immediate`: no shutdown checkpoint, sessions cut) and the standby is
//! promoted. The services follow it through `DATABASE_URLS`, with no
//! restart; every order committed before the switch is on the new primary, none is applied
//! twice, and every order settles.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use testkit::standby::PrivateStandby;
use testkit::{TestVhost, eventually};

use crate::fleet::{Databases, Fleet, Load, LoadPlan, ServiceEnv, check_invariants};

/// The load: `RATE` orders per second for `DURATION`; the primary stops after `SWITCH_AFTER`.
const RATE: u32 = 40;
const DURATION: Duration = Duration::from_secs(30);
const SWITCH_AFTER: Duration = Duration::from_secs(10);
/// How long the orders and outboxes get to settle once the load stopped.
const SETTLE: Duration = Duration::from_secs(90);

/// The ids of the orders (in the orders database) or of the reservations (in inventory's).
async fn ids(url: &str, sql: &'static str) -> BTreeSet<String> {
    let pool = PgPool::connect(url).await.expect(url);
    let ids = sqlx::query_scalar(sql).fetch_all(&pool).await.expect(sql);
    pool.close().await;
    ids.into_iter().collect()
}

const ORDER_IDS: &str = "SELECT order_id::text FROM orders";
const RESERVATION_IDS: &str = "SELECT order_id::text FROM reservations";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own clusters; scripts/clusters.sh runs these"]
async fn orders_survive_a_switch_to_the_synchronous_standby() {
    let began = Instant::now();
    let pair = tokio::task::spawn_blocking(PrivateStandby::start)
        .await
        .expect("the primary and its standby start");
    let vhost = TestVhost::create();
    let backing = |database: &str| {
        ServiceEnv::default()
            .with("DATABASE_URLS", pair.urls(database).join(","))
            .with("REDIS_URL", testkit::redis_url())
            .with("AMQP_URL", vhost.url.clone())
    };
    let fleet = Fleet::start(backing("orders"), backing("inventory"), 2).await;
    // Little stock on one product: some orders are rejected, so both outcomes are checked.
    let initial = [(1, 1_000), (2, 1_000), (3, 40)];
    fleet.create_products(&initial).await;

    let plan = LoadPlan {
        rate: RATE,
        duration: DURATION,
        products: initial.iter().map(|&(id, _)| id).collect(),
        give_up: Duration::from_secs(60),
    };
    println!(
        "load: {RATE} orders/s for {DURATION:?} ({} orders); after {SWITCH_AFTER:?} the primary \
         crashes (immediate stop) and the synchronous standby is promoted",
        RATE as u64 * DURATION.as_secs()
    );
    let load = Load::start(&fleet, plan);
    tokio::time::sleep(SWITCH_AFTER).await;

    // What the old primary holds just before it goes: every one of these was committed, so
    // the standby has it too (synchronous_commit = on), crash or not.
    let committed_orders = ids(&pair.primary.url("orders", ""), ORDER_IDS).await;
    let committed_reservations = ids(&pair.primary.url("inventory", ""), RESERVATION_IDS).await;
    let stopped = Instant::now();
    tokio::task::block_in_place(|| pair.fail_over("immediate"));
    let promoted = stopped.elapsed();
    // Order intake is back once the new primary holds more orders than it had at promotion
    // (everything committed before the stop).
    let new_orders = pair.standby.url("orders", "");
    let new_primary = PgPool::connect(&new_orders).await.expect("the new primary");
    let orders_now = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders")
            .fetch_one(&new_primary)
            .await
            .expect("count the orders")
    };
    let at_promotion = orders_now().await;
    let resumed = eventually(Duration::from_secs(60), || async {
        (orders_now().await > at_promotion).then(|| stopped.elapsed())
    })
    .await;
    new_primary.close().await;
    println!(
        "outage: primary stopped with {} orders and {} reservations committed; standby promoted \
         {:.1} s later; orders written to the new primary again {:.1} s after the stop",
        committed_orders.len(),
        committed_reservations.len(),
        promoted.as_secs_f64(),
        resumed.as_secs_f64()
    );

    let report = load.finish().await;
    println!("load: {report}");
    assert!(
        report.refused.is_empty(),
        "every order is answered once the new primary takes writes: {:?}",
        report.refused
    );
    let kept_orders = ids(&new_orders, ORDER_IDS).await;
    let kept_reservations = ids(&pair.standby.url("inventory", ""), RESERVATION_IDS).await;
    assert!(
        committed_orders.is_subset(&kept_orders),
        "an order committed before the switch is missing after it"
    );
    assert!(
        committed_reservations.is_subset(&kept_reservations),
        "a reservation committed before the switch is missing after it"
    );

    let databases = Databases {
        orders: new_orders.clone(),
        inventory: pair.standby.url("inventory", ""),
    };
    check_invariants(&fleet, &report, &databases, &vhost.url, &initial, SETTLE).await;
    println!(
        "scenario: {:.0} s end to end (the pair's start included)",
        began.elapsed().as_secs_f64()
    );
}
