//! inventory-service in a process of its own: a test can pause it with `SIGSTOP` and read
//! metrics that are its alone (in the test process one metrics registry serves every test).
//!
//! It runs this package's `inventory-service-process` binary, which wires the service exactly
//! as inventory-service's own binary does (configuration from the environment, shutdown on
//! SIGTERM).

use std::process::Child;

use serde_json::Value;
use testkit::{TestVhost, signal};

use crate::helpers::{ADMIN, create_product, reservation_of, stock_of};

pub struct InventoryProcess {
    child: Child,
    pub base: String,
    client: reqwest::Client,
}

impl InventoryProcess {
    /// Starts inventory-service on the database `database_url` names (either backend) and
    /// `vhost`, and waits until it is ready.
    pub async fn start(database_url: &str, vhost: &TestVhost) -> Self {
        let port = testkit::free_port();
        let child = testkit::service_command_on(
            port,
            env!("CARGO_BIN_EXE_inventory-service-process"),
            database_url,
            &vhost.url,
        )
        .env("ADMIN_TOKEN", ADMIN)
        .spawn()
        .expect("the child starts");
        let process = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        };
        testkit::wait_until_ok(&process.url("/readyz")).await;
        process
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pause(&self) {
        signal(&self.child, "STOP");
    }

    pub fn resume(&self) {
        signal(&self.child, "CONT");
    }

    pub async fn create_product(&self, product_id: i64, stock: i64) {
        create_product(&self.client, &self.base, product_id, stock).await;
    }

    pub async fn stock(&self, product_id: i64) -> i64 {
        stock_of(&self.client, &self.base, product_id).await
    }

    pub async fn reservation(&self, order_id: &str) -> Option<Value> {
        reservation_of(
            self.client
                .get(self.url(&format!("/reservations/{order_id}"))),
        )
        .await
    }

    /// The value of the counter `name` with the label `label` (`result="retried"`), from the
    /// process's own `/metrics`.
    pub async fn counter(&self, name: &str, label: &str) -> f64 {
        let text = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for InventoryProcess {
    fn drop(&mut self) {
        // A paused process ignores SIGTERM until it resumes; SIGKILL ends it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
