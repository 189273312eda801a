//! The inventory flow on every lock service (`STOCK_LOCK`), each on servers of the test's own
//! (one Redis is the machine's, under a prefix), on both database backends: 200 concurrent
//! deductions on a stock of 50 apply exactly 50, and orders' events reserve, refuse and
//! release stock once. What tells the backends apart beyond this (a node lost, a holder
//! stalled past its lock) is in each one's own module.

use std::time::Duration;

use inventory_service::Config;
use inventory_service::stock::lock::Backend as LockBackend;
use testkit::Backend;
use testkit::etcd::EtcdCluster;
use testkit::redis::PrivateRedis;
use testkit::redis_cluster::PrivateRedisCluster;

use crate::helpers::{
    TestApp, assert_exactly_fifty_applied, patient, reserve_refuse_release, stampede,
};

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    the_flow_on_redis,
    the_flow_on_redis_cluster,
    the_flow_on_redlock,
    the_flow_on_etcd,
    the_flow_on_database,
);

async fn the_flow_on_redis(backend: Backend) {
    the_flow_on(LockBackend::Redis, backend).await;
}

async fn the_flow_on_redis_cluster(backend: Backend) {
    the_flow_on(LockBackend::RedisCluster, backend).await;
}

async fn the_flow_on_redlock(backend: Backend) {
    the_flow_on(LockBackend::Redlock, backend).await;
}

async fn the_flow_on_etcd(backend: Backend) {
    the_flow_on(LockBackend::Etcd, backend).await;
}

async fn the_flow_on_database(backend: Backend) {
    the_flow_on(LockBackend::Database, backend).await;
}

/// The servers of one lock service, stopped when dropped, and the settings that point the
/// service at them.
#[derive(Default)]
struct LockService {
    cluster: Option<PrivateRedisCluster>,
    masters: Vec<PrivateRedis>,
    etcd: Option<EtcdCluster>,
}

impl LockService {
    async fn start(lock: LockBackend) -> Self {
        let mut service = Self::default();
        match lock {
            LockBackend::RedisCluster => service.cluster = Some(PrivateRedisCluster::start().await),
            LockBackend::Redlock => {
                for _ in 0..3 {
                    service.masters.push(PrivateRedis::start().await);
                }
            }
            LockBackend::Etcd => service.etcd = Some(EtcdCluster::start(3).await),
            LockBackend::Redis | LockBackend::Database => {}
        }
        service
    }

    fn configure(&self, lock: LockBackend, config: &mut Config) {
        patient(config);
        config.stock_lock = lock;
        if let Some(cluster) = &self.cluster {
            config.redis_cluster = Some(cluster.settings(Duration::from_secs(10)));
        }
        config.redlock_urls = self.masters.iter().map(|m| m.url.clone()).collect();
        if let Some(etcd) = &self.etcd {
            config.etcd_endpoints = etcd.endpoints();
        }
    }
}

async fn the_flow_on(lock: LockBackend, backend: Backend) {
    let service = LockService::start(lock).await;
    let app = TestApp::spawn_on(backend, |c| service.configure(lock, c)).await;
    let locker = app.deductions.locker();
    assert_eq!(locker.backend(), lock.as_str());

    app.create_product(1, 50).await;
    let statuses = stampede(&app, 1, 200).await;
    assert_exactly_fifty_applied(&app, 1, &statuses).await;

    // Orders' events, through the consumer's batches and their locks.
    reserve_refuse_release(&app, 2).await;

    let stats = locker.stats();
    assert!(stats.acquired > 0, "{lock:?} took its locks: {stats:?}");
    assert_eq!(stats.bypassed, 0, "{lock:?} never bypassed: {stats:?}");
}
