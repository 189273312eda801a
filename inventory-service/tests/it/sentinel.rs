//! Redis through Sentinel (`REDIS_SENTINELS`, `REDIS_SENTINEL_MASTER`): the locks follow the
//! primary through a failover, whether the old one died or was demoted while it ran. Each
//! test has a deployment of its own (primary, replica, three Sentinels) on its own ports.

use std::time::Duration;

use inventory_service::stock::lock::RedisLock;
use platform::storage::redis::RedisConnection;
use platform::storage::tls::CaBundle;
use redis::AsyncCommands;
use shared::ids::ProductId;
use testkit::eventually;
use testkit::sentinel::PrivateSentinel;
use testkit::tls::TestCa;
use tokio_util::sync::DropGuard;

/// A failover takes the Sentinels' down-after time, an election and a promotion: seconds.
const FAILOVER: Duration = Duration::from_secs(60);

const PRODUCT: ProductId = ProductId(7);

/// A locker on a connection through `deployment`'s Sentinels, with the health check the
/// services run, until the guard is dropped.
fn locker_through(deployment: &PrivateSentinel) -> (RedisLock, RedisConnection, DropGuard) {
    // The Sentinels say where the primary is; this URL's port is never used.
    locker_through_as(deployment, &PrivateSentinel::url(1), None)
}

/// [`locker_through`] with `url` for the data nodes, trusting `ca`.
fn locker_through_as(
    deployment: &PrivateSentinel,
    url: &str,
    ca: Option<&CaBundle>,
) -> (RedisLock, RedisConnection, DropGuard) {
    let conn = platform::storage::redis::connect_with_timeout(
        url,
        Some(&deployment.sentinels()),
        Duration::from_millis(300),
        ca,
    )
    .expect("a Redis connection through Sentinel");
    let (locker, _, watch) = crate::helpers::watched_locker(conn.clone());
    (locker, conn, watch)
}

/// Takes the product's lock and answers whether its key was on the node at `port` while
/// held; `None` when the lock was bypassed (Redis down for the locker).
async fn lock_lands_on(deployment: &PrivateSentinel, locker: &RedisLock, port: u16) -> Option<()> {
    let locks = locker.acquire(PRODUCT).await.ok()?;
    let held = !locks.is_bypassed();
    let mut node = deployment.node(port).await;
    let on_node: bool = node.exists(locker.key(PRODUCT)).await.unwrap_or(false);
    locks.release().await;
    (held && on_node).then_some(())
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_are_taken_on_the_promoted_replica_after_the_primary_is_killed() {
    let mut deployment = PrivateSentinel::start(27200..27215).await;
    let (locker, conn, _watch) = locker_through(&deployment);
    let first = deployment.primary_port().await;
    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, first)).await;

    let killed = deployment.kill_primary().await;
    let promoted = deployment.await_failover(killed).await;

    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, promoted)).await;
    assert_eq!(
        conn.primary_address(),
        Some(format!("127.0.0.1:{promoted}"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_demoted_while_it_runs_is_left_for_the_one_promoted() {
    let deployment = PrivateSentinel::start(27215..27230).await;
    let (locker, conn, _watch) = locker_through(&deployment);
    let first = deployment.primary_port().await;
    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, first)).await;

    deployment.force_failover().await;
    let promoted = deployment.await_failover(first).await;

    // The old primary still answers, as a replica: a lock written there would be refused
    // (`READONLY`), so one that lands on the promoted node shows the connection moved.
    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, promoted)).await;
    assert_eq!(
        conn.primary_address(),
        Some(format!("127.0.0.1:{promoted}"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_rediss_the_sentinels_and_the_primary_they_name_are_reached_over_tls() {
    let ca = TestCa::new();
    let mut deployment = PrivateSentinel::start_tls(27230..27245, &ca).await;
    let trusted = CaBundle::load(ca.ca_file()).expect("the test CA");
    let (locker, _, _watch) =
        locker_through_as(&deployment, "rediss://127.0.0.1:1/0", Some(&trusted));
    let first = deployment.primary_port().await;
    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, first)).await;

    let killed = deployment.kill_primary().await;
    let promoted = deployment.await_failover(killed).await;
    eventually(FAILOVER, || lock_lands_on(&deployment, &locker, promoted)).await;
}
