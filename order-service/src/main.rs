//! `order-service`: everything lives in the library; this only wires the process.

fn main() -> anyhow::Result<()> {
    platform::runtime::build()?.block_on(platform::telemetry::run(
        "order-service",
        order_service::run_from_env(),
    ))
}
