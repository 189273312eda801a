//! inventory-service as a process the e2e tests start, pause (`SIGSTOP`) and read metrics from.
//! Cargo hands a test the paths of its own package's binaries only, so this package has one
//! that runs the service exactly as its own binary does.

fn main() -> anyhow::Result<()> {
    platform::runtime::build()?.block_on(platform::telemetry::run(
        "inventory-service",
        inventory_service::run_from_env(),
    ))
}
