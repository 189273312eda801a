//! Logs and traces. `RUST_LOG` filters the log, `LOG_FORMAT=json` makes it one JSON object per
//! line. Every span also goes to OpenTelemetry, so that each has a W3C trace and span id to log
//! and to pass on; they leave the process only when [`otlp`] export is configured.

pub mod metrics;
pub mod otlp;
pub mod trace_context;

pub use trace_context::TraceContext;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Metadata;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, FilterFn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The tracer provider of the process; [`Telemetry::shutdown`] exports the spans still queued.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Flushes and stops the exporter. It blocks until the last batch is sent (or the export
    /// timeout passes), so it runs off the async workers.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(%error, "could not flush the last spans");
        }
    }
}

/// Runs `service` (a binary's whole life, lazy until awaited) with telemetry installed by
/// [`init`], and flushes the spans still queued once it returns.
pub async fn run(
    service: &str,
    main: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let telemetry = init(service)?;
    let served = main.await;
    telemetry.shutdown().await;
    served
}

/// Installs the global subscriber for the service `service` (the default `service.name`).
/// Refuses `OTEL_*` settings that cannot work, naming the variable. Must run inside the Tokio
/// runtime (the gRPC exporter starts its connection there).
pub fn init(service: &str) -> anyhow::Result<Telemetry> {
    let export = otlp::Export::from_env(service)?;
    let provider = export.provider()?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let log = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer().boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(spans(&provider))
        .try_init();
    Ok(Telemetry { provider })
}

/// The OpenTelemetry layer: every span at `info` or above whatever `RUST_LOG` says (a quiet
/// log must not break traces), and no log events (those are the log's, not the trace's).
pub fn spans<S>(provider: &SdkTracerProvider) -> impl Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("platform"))
        .with_filter(FilterFn::new(|meta: &Metadata<'_>| {
            meta.is_span() && *meta.level() <= tracing::Level::INFO
        }))
}

/// A provider that gives spans ids and exports nothing, for tests that install their own
/// subscriber.
pub fn local_provider() -> SdkTracerProvider {
    SdkTracerProvider::builder().build()
}
