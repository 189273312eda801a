//! The fleet itself, on the machine's own single-node services: no outage, so any invariant
//! that fails here is the harness's fault (or the services'), not a cluster's.

use std::time::Duration;

use testkit::{TestDatabase, TestVhost};

use crate::fleet::{Databases, Fleet, Load, LoadPlan, ServiceEnv, check_invariants};

/// How long the orders and outboxes get to settle once the load stopped.
const SETTLE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own clusters; scripts/clusters.sh runs these"]
async fn the_fleet_keeps_the_invariants_without_an_outage() {
    let vhost = TestVhost::create();
    let order_db = TestDatabase::create("clusters_orders", &order_service::MIGRATOR).await;
    let inventory_db =
        TestDatabase::create("clusters_inventory", &inventory_service::MIGRATOR).await;
    let backing = |database_url: &str| {
        ServiceEnv::default()
            .with("DATABASE_URL", database_url)
            .with("REDIS_URL", testkit::redis_url())
            .with("AMQP_URL", vhost.url.clone())
    };
    let fleet = Fleet::start(backing(&order_db.url), backing(&inventory_db.url), 2).await;
    // Little stock on one product: some orders are rejected, so both outcomes are checked.
    let initial = [(1, 1_000), (2, 1_000), (3, 40)];
    fleet.create_products(&initial).await;

    let plan = LoadPlan {
        rate: 40,
        duration: Duration::from_secs(5),
        products: initial.iter().map(|&(id, _)| id).collect(),
        give_up: Duration::from_secs(30),
    };
    println!(
        "load: {} orders/s for {:?}, no outage",
        plan.rate, plan.duration
    );
    let report = Load::start(&fleet, plan).finish().await;
    println!("load: {report}");
    assert!(
        report.refused.is_empty(),
        "nothing failed, nothing may be refused"
    );

    let databases = Databases::of(&order_db, &inventory_db);
    check_invariants(&fleet, &report, &databases, &vhost.url, &initial, SETTLE).await;
}
