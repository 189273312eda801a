//! order-service as a process the e2e tests start: wired exactly as order-service's own binary
//! (configuration from the environment, telemetry, shutdown on SIGTERM), for tests that need
//! what is the process's alone (its tracer provider, its exit).

fn main() -> anyhow::Result<()> {
    platform::runtime::build()?.block_on(platform::telemetry::run(
        "order-service",
        order_service::run_from_env(),
    ))
}
