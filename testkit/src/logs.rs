//! Logs for tests.

/// Logs for tests: captured per test by the test harness, `warn` unless `RUST_LOG` says
/// otherwise; spans get trace ids as in the services (nothing is exported).
pub fn init_logs() {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    static PROVIDER: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracerProvider> =
        std::sync::OnceLock::new();
    let provider = PROVIDER.get_or_init(platform::telemetry::local_provider);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter),
        )
        .with(platform::telemetry::spans(provider))
        .try_init();
}
