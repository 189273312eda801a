//! `inventory-service`: owns products and stock, deducts under a Redis lock plus a
//! conditional update. Everything lives in the library; this only wires the process.

fn main() -> anyhow::Result<()> {
    platform::runtime::build()?.block_on(platform::telemetry::run(
        "inventory-service",
        inventory_service::run_from_env(),
    ))
}
