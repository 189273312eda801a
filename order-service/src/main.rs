use anyhow::Context;
use order_service::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    platform::telemetry::init();
    let config = Config::from_env()?;
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let state = order_service::build_state(config).await?;
    let shutdown = platform::shutdown::on_signal(
        state.config.shutdown_drain,
        state.readiness.draining.clone(),
    );
    order_service::serve(state, listener, shutdown).await
}
