//! Prometheus metrics: one process-wide recorder, the HTTP middleware, and `/metrics`.
//!
//! Metric names are part of the contract (dashboards rely on them), so each service
//! registers every metric it owns at start with [`zero_counter`] / [`zero_gauge`], and a
//! scrape of a fresh process already shows them at zero.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const HTTP_REQUESTS_TOTAL: &str = "http_requests_total";
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "http_request_duration_seconds";

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
        describe_http();
        handle
    })
}

fn describe_http() {
    metrics::describe_counter!(
        HTTP_REQUESTS_TOTAL,
        "HTTP requests answered, by method, matched route and status"
    );
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "HTTP request latency, by method, matched route and status"
    );
    let labels = [("method", "GET"), ("route", "/healthz"), ("status", "200")];
    metrics::counter!(HTTP_REQUESTS_TOTAL, &labels).absolute(0);
    let _ = metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, &labels);
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

/// `GET /metrics`.
pub async fn render() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle().render(),
    )
        .into_response()
}

/// The matched route, carried from inside the router to the outer metrics middleware.
#[derive(Debug, Clone)]
struct RouteLabel(String);

/// Route layer: records which route matched (only known inside the router).
pub async fn remember_route(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let mut response = next.run(request).await;
    if let Some(route) = route {
        response.extensions_mut().insert(RouteLabel(route));
    }
    response
}

/// Outer layer: counts, times and logs (see [`super::access_log`]) every request, including
/// 404s that matched no route.
pub async fn record(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let request_id = request
        .headers()
        .get(super::edge::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let latency = started.elapsed();
    let route = response
        .extensions()
        .get::<RouteLabel>()
        .map_or_else(|| "unmatched".to_owned(), |r| r.0.clone());
    let status = response.status().as_u16();
    super::access_log::record(&method, &route, status, latency, &request_id);
    let labels = [
        ("method", method),
        ("route", route),
        ("status", status.to_string()),
    ];
    metrics::counter!(HTTP_REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, &labels).record(latency.as_secs_f64());
    response
}
