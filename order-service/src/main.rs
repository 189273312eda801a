//! `order-service`: everything lives in the library; this only wires the process.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::telemetry::run("order-service", order_service::run_from_env()).await
}
