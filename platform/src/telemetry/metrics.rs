//! Prometheus metrics: one process-wide recorder, and the helpers that expose each metric at
//! zero. Metric names are part of the contract (dashboards rely on them), so each service
//! registers every metric it owns at start with [`zero_counter`] / [`zero_gauge`], and a
//! scrape of a fresh process already shows them at zero.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets from half a millisecond to ten seconds.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process-wide recorder, installed on first use. Every metric whose name ends in
/// `_seconds` is a histogram with [`SECONDS_BUCKETS`].
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder may exist only in tests that installed one on purpose; then
        // this handle still renders what it records.
        let _ = metrics::set_global_recorder(recorder);
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    upkeep.run_upkeep();
                }
            })
            .ok();
        handle
    })
}

/// Registers a counter at zero for each label value, so it is exposed before its first event.
pub fn zero_counter(name: &'static str, label: &'static str, values: &[&'static str]) {
    if values.is_empty() {
        metrics::counter!(name).absolute(0);
    }
    for value in values {
        metrics::counter!(name, label => *value).absolute(0);
    }
}

/// Registers a histogram, so it is exposed (with zero observations) before its first one.
pub fn zero_histogram(name: &'static str) {
    let _ = metrics::histogram!(name);
}

/// Registers a gauge at zero.
pub fn zero_gauge(name: &'static str) {
    metrics::gauge!(name).set(0.0);
}
