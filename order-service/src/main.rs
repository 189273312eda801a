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
