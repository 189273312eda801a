//! `inventory-service`: owns products and stock, deducts under a Redis lock plus a
//! conditional update. Everything lives in the library; this only wires the process.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::telemetry::run("inventory-service", inventory_service::run_from_env()).await
}
