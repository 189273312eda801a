//! A three-node RabbitMQ cluster loses the node that leads the most quorum queues while two
//! instances of each service are under steady load, and gets it back. PostgreSQL and Redis are
//! the machine's.
//!
//! What it shows: every instance finds a live node by itself (`AMQP_URLS`) while the lost one
//! is down, orders keep being taken all along (intake needs no broker: the outbox holds the
//! events), and once the dust settles invariants 1–5 of docs/contract.md §4.3 hold.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use testkit::rabbitmq_cluster::PrivateRabbitCluster;
use testkit::{TestDatabase, eventually};

use crate::fleet::{Databases, Fleet, Load, LoadPlan, ServiceEnv, check_invariants};

/// The cluster's ports: 27100–27199, below the kernel's ephemeral range (32768–60999 here).
/// Inside it, another test's free port or any client's source port could take a node's port
/// between the choice and the bind (a node once failed to boot with `dist_port_already_used`).
const BASE_PORT: u16 = 27100;
const NODES: usize = 3;
const INSTANCES: usize = 2;
const AFTER_THE_RETURN: Duration = Duration::from_secs(10);
/// How long the orders and outboxes get to settle once the load stopped.
const SETTLE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
#[ignore = "starts its own clusters; scripts/clusters.sh runs these"]
async fn losing_the_node_that_leads_the_most_queues_under_load_keeps_the_invariants() {
    let started = Instant::now();
    let mut cluster = PrivateRabbitCluster::start(NODES, BASE_PORT).await;
    println!(
        "cluster: {NODES} RabbitMQ nodes joined in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let order_db = TestDatabase::create("clusters_orders", &order_service::MIGRATOR).await;
    let inventory_db =
        TestDatabase::create("clusters_inventory", &inventory_service::MIGRATOR).await;
    let nodes = cluster.amqp_urls().join(",");
    let backing = |database_url: &str| {
        ServiceEnv::default()
            .with("DATABASE_URL", database_url)
            .with("REDIS_URL", testkit::redis_url())
            .with("AMQP_URLS", nodes.clone())
    };
    let fleet = Fleet::start(
        backing(&order_db.url),
        backing(&inventory_db.url),
        INSTANCES,
    )
    .await;

    // The services declared the topology; each quorum queue has a replica on every node.
    let replicas = cluster.queue_replicas().await;
    assert_eq!(
        replicas.len(),
        4,
        "two queues and their dead-letter queues: {replicas:?}"
    );
    for queue in &replicas {
        assert_eq!(
            queue.members.len(),
            NODES,
            "{} is replicated on every node: {:?}",
            queue.name,
            queue.members
        );
    }
    let mut led: BTreeMap<String, usize> = BTreeMap::new();
    for queue in &replicas {
        *led.entry(queue.leader.clone()).or_default() += 1;
        println!(
            "queue {}: leader {}, members {:?}",
            queue.name, queue.leader, queue.members
        );
    }
    let (victim_name, _) = led
        .iter()
        .max_by_key(|(_, queues)| **queues)
        .expect("a leader");
    let victim = (0..NODES)
        .find(|&node| cluster.node_name(node) == *victim_name)
        .expect("the leader is a node of the cluster");

    // Little stock on one product: some orders are rejected, so both outcomes go through.
    let initial = [(1, 100_000), (2, 100_000), (3, 300)];
    fleet.create_products(&initial).await;
    let plan = |duration| LoadPlan {
        rate: 40,
        duration,
        products: initial.iter().map(|&(id, _)| id).collect(),
        give_up: Duration::from_secs(60),
    };
    let through = plan(Duration::from_secs(40));
    println!(
        "load: {} orders/s for {} s over products {:?}, two order-service and two \
         inventory-service instances; then {} s more once the node is back",
        through.rate,
        through.duration.as_secs(),
        through.products,
        AFTER_THE_RETURN.as_secs()
    );
    let load = Load::start(&fleet, through);

    // Steady state first, then the outage in the middle of the load.
    tokio::time::sleep(Duration::from_secs(8)).await;
    // The services are the cluster's only clients: one connection per instance.
    let services = cluster.client_connections().await;
    let on_victim = services.iter().filter(|&&node| node == victim).count();
    println!(
        "outage: stopping {victim_name} (leads {} of {} queues; holds {on_victim} of the \
         services' {} connections)",
        led[victim_name],
        replicas.len(),
        services.len()
    );
    let outage = Instant::now();
    cluster.stop_node(victim).await;
    println!(
        "outage: {victim_name} stopped after {:.1} s",
        outage.elapsed().as_secs_f64()
    );

    // Every instance holds a connection again, to the nodes still up, while the victim is down.
    let every_instance = 2 * INSTANCES;
    eventually(Duration::from_secs(60), || async {
        let services = cluster.client_connections().await;
        (services.len() == every_instance && !services.contains(&victim)).then_some(())
    })
    .await;
    println!(
        "outage: all {every_instance} instances connected to the remaining nodes {:.1} s after \
         the stop began",
        outage.elapsed().as_secs_f64()
    );
    for queue in cluster.queue_replicas().await {
        println!("queue {}: leader now {}", queue.name, queue.leader);
    }

    // Down long enough for orders to flow through the two remaining nodes, then back.
    tokio::time::sleep(Duration::from_secs(8)).await;
    cluster.start_node(victim).await;
    println!(
        "outage: {victim_name} back in the cluster; it was out for {:.1} s",
        outage.elapsed().as_secs_f64()
    );

    let mut report = load.finish().await;
    println!("load through the outage: {report}");
    // However long the node took to come back, the rejoined cluster takes load too.
    let after = Load::start(&fleet, plan(AFTER_THE_RETURN)).finish().await;
    println!("load after the return: {after}");
    report.accepted.extend(after.accepted);
    for (status, count) in after.refused {
        *report.refused.entry(status).or_default() += count;
    }
    report.retried += after.retried;
    assert!(
        report.refused.is_empty(),
        "taking an order needs no broker, so the outage refuses none: {:?}",
        report.refused
    );
    let mut publish_failures = 0.0;
    for base in fleet.order_bases().iter().chain(&fleet.inventory_bases()) {
        publish_failures += testkit::scrape_metric(base, "outbox_publish_failures_total").await;
    }
    println!(
        "relay: {publish_failures} failed publish attempts (nacked, unconfirmed or cut off), each row retried"
    );
    for queue in cluster.queue_replicas().await {
        assert_eq!(
            queue.members.len(),
            NODES,
            "{} keeps its replicas",
            queue.name
        );
    }
    let databases = Databases::of(&order_db, &inventory_db);
    let amqp_url = &cluster.amqp_urls()[0];
    check_invariants(&fleet, &report, &databases, amqp_url, &initial, SETTLE).await;
    drop(fleet);
    drop(cluster);
    println!(
        "scenario: {:.0} s end to end, cluster start and stop included",
        started.elapsed().as_secs_f64()
    );
}
