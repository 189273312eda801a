//! `inventory-service`: owns products and stock, deducts under a Redis lock plus a
//! conditional update. Everything lives in the library; this only wires the process.

use anyhow::Context;
use inventory_service::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::telemetry::init();
    let config = Config::from_env()?;
    let shutdown = platform::shutdown::on_signal();
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding HTTP_ADDR {}", config.http_addr))?;
    tracing::info!(addr = %listener.local_addr()?, "inventory-service listening");
    let state = inventory_service::build_state(config).await?;
    inventory_service::serve(state, listener, shutdown).await
}
