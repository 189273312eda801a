//! order-service as a process the e2e tests start: wired exactly as order-service's own binary
//! (configuration from the environment, telemetry, shutdown on SIGTERM), for tests that need
//! what is the process's alone (its tracer provider, its exit).

use anyhow::Context;
use order_service::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let telemetry = platform::telemetry::init("order-service")?;
    let config = Config::from_env()?;
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let state = order_service::build_state(config).await?;
    let served = order_service::serve(state, listener, platform::shutdown::on_signal()).await;
    telemetry.shutdown().await;
    served
}
