//! inventory-service in a process of its own: a test can pause it with `SIGSTOP` and read
//! metrics that are its alone (in the test process one metrics registry serves every test).
//!
//! It runs this package's `inventory-service-process` binary, which wires the service exactly
//! as inventory-service's own binary does (configuration from the environment, shutdown on
//! SIGTERM).

use std::process::Child;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{TestDatabase, TestVhost, eventually, signal};

use crate::helpers::ADMIN;

pub struct InventoryProcess {
    child: Child,
    pub base: String,
    client: reqwest::Client,
}

impl InventoryProcess {
    /// Starts inventory-service on `db` and `vhost` and waits until it is ready.
    pub async fn start(db: &TestDatabase, vhost: &TestVhost) -> Self {
        let port = testkit::free_port();
        let child = testkit::service_command(
            env!("CARGO_BIN_EXE_inventory-service-process"),
            &db.url,
            &vhost.url,
            &testkit::redis_prefix(),
        )
        .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("ADMIN_TOKEN", ADMIN)
        .spawn()
        .expect("the child starts");
        let process = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        };
        eventually(Duration::from_secs(30), || async {
            let ready = process.client.get(process.url("/readyz")).send().await;
            ready
                .is_ok_and(|r| r.status() == StatusCode::OK)
                .then_some(())
        })
        .await;
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
        let response = self
            .client
            .post(self.url("/products"))
            .bearer_auth(ADMIN)
            .json(&json!({"product_id": product_id, "name": "paused", "stock": stock}))
            .send()
            .await
            .expect("create product");
        assert_eq!(response.status(), StatusCode::CREATED);
    }

    pub async fn stock(&self, product_id: i64) -> i64 {
        let product: Value = self
            .client
            .get(self.url(&format!("/products/{product_id}")))
            .send()
            .await
            .expect("get product")
            .json()
            .await
            .expect("json");
        product["stock"].as_i64().expect("stock")
    }

    pub async fn reservation(&self, order_id: &str) -> Option<Value> {
        let response = self
            .client
            .get(self.url(&format!("/reservations/{order_id}")))
            .send()
            .await
            .expect("reservation");
        match response.status() {
            StatusCode::OK => Some(response.json().await.expect("json")),
            _ => None,
        }
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
