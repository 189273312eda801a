//! HTTP checks tests share: a metric scraped from `/metrics`, settings a service must refuse,
//! credentials an admin route must refuse, problem+json answers, JSON bodies read while
//! polling, a process waited for until it answers.

use serde_json::Value;

use crate::{NO_BROKER, expect_refused_start, free_port, service_command_on};

/// The value of the metric line of `base`'s `/metrics` that starts with `series` (name and
/// labels), 0 when absent or when the service does not answer.
pub async fn scrape_metric(base: &str, series: &str) -> f64 {
    let Ok(response) = reqwest::get(format!("{base}/metrics")).await else {
        return 0.0;
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Starts the service `binary` once per `(variable, value)` of [`REFUSED_BY_EVERY_SERVICE`] and
/// of `refused` (the service's own), on `database_url`, and asserts that each start is refused
/// with a message naming the variable. An `AMQP_URLS` stands in for the command's `AMQP_URL`
/// (both together are refused whatever they say).
pub async fn assert_each_setting_refused(
    binary: &'static str,
    database_url: &str,
    refused: &[(&'static str, &'static str)],
) {
    for &(name, value) in REFUSED_BY_EVERY_SERVICE.iter().chain(refused) {
        let mut command = service_command_on(free_port(), binary, database_url, NO_BROKER);
        command.env(name, value);
        if name == "AMQP_URLS" {
            command.env_remove("AMQP_URL");
        }
        let stderr = tokio::task::spawn_blocking(move || expect_refused_start(command))
            .await
            .expect("the check runs");
        assert!(
            stderr.contains(name),
            "{name}={value:?} was refused without naming it: {stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "{name}={value:?} was refused by a panic, not a message: {stderr}"
        );
    }
}

/// Values of the settings both services read the same way (through `platform`) that neither
/// may start with: each service's own list of refused settings adds to these.
pub const REFUSED_BY_EVERY_SERVICE: &[(&str, &str)] = &[
    // A scheme no backend has, and a MySQL URL its driver cannot read: neither reaches a
    // server. (A list mixing the backends is refused too: `platform::config`'s own test.)
    ("DATABASE_URL", "foo://postgres@127.0.0.1:5432/refused"),
    ("DATABASE_URL", "mysql://root@127.0.0.1:not-a-port/refused"),
    ("RELAY_BATCH_SIZE", "0"),
    ("REDIS_CLUSTER_URLS", "127.0.0.1:7000"),
    ("REDIS_CLUSTER_WAIT_MS", "0"),
    ("REDIS_KEY_PREFIX", "{shop}:"),
    ("CONSUMER_PREFETCH", "0"),
    ("RETENTION_SECS", "0"),
    ("DATABASE_MAX_CONNECTIONS", "0"),
    ("REQUEST_TIMEOUT_SECS", "0"),
    ("REDIS_TIMEOUT_MS", "0"),
    ("REDIS_SENTINELS", "127.0.0.1:26379"),
    ("REDIS_SENTINEL_MASTER", "mymaster"),
    ("RATE_LIMIT_PER_SEC", "-1"),
    ("RATE_LIMIT_BURST", "lots"),
    ("HTTP_ADDR", "nowhere"),
    ("SHUTDOWN_DRAIN_SECS", "-1"),
    ("SHUTDOWN_DRAIN_SECS", "301"),
    ("SHUTDOWN_DRAIN_SECS", "five"),
    ("REDIS_CA_FILE", "/nonexistent/ca.pem"),
    ("AMQP_CA_FILE", "/etc/hostname"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
    // Left to Tokio, these panic when the runtime is built.
    ("TOKIO_WORKER_THREADS", "0"),
    ("TOKIO_WORKER_THREADS", "two"),
    ("AMQP_URLS", "amqp://guest:guest@127.0.0.1:1/%2f,not a url"),
    ("AMQP_URLS", "amqp://guest:guest@127.0.0.1:1/%2f,"),
];

/// Credentials an admin route must refuse: none, a wrong bearer token, another scheme.
pub const REFUSED_CREDENTIALS: [Option<&str>; 3] =
    [None, Some("Bearer wrong-token"), Some("Basic dXNlcjpwdw==")];

/// Sends `request` with `credential` as its `Authorization` header (none for `None`); the
/// response and its challenge (see [`challenge_of`]).
pub async fn send_with_credential(
    request: reqwest::RequestBuilder,
    credential: Option<&str>,
) -> (reqwest::Response, String) {
    let request = match credential {
        Some(value) => request.header("Authorization", value),
        None => request,
    };
    let response = request.send().await.expect("request");
    let challenge = challenge_of(&response);
    (response, challenge)
}

/// The response's `WWW-Authenticate` challenge, empty when it has none.
pub fn challenge_of(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Asserts a problem+json answer: `status`, the content type, `type`
/// `/problems/<slug>`, the status repeated in the body, a title and a detail; returns the body.
pub async fn assert_problem(response: reqwest::Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status(), status, "status of a {slug} problem");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, shared::problem::CONTENT_TYPE, "content type");
    let body: Value = response.json().await.expect("a problem body");
    assert_eq!(body["type"], format!("/problems/{slug}"), "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// Asserts the 429 `rate-limited` problem of a client past its burst, with a `Retry-After` of
/// at least a second.
pub async fn assert_rate_limited(response: reqwest::Response) {
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!(retry_after >= 1, "Retry-After: {retry_after}");
    assert_problem(response, 429, "rate-limited").await;
}

/// A rate limit of one request a second per client after a burst of `burst`.
pub fn one_a_second_after(burst: u32) -> platform::http::RateLimit {
    platform::http::RateLimit { per_sec: 1, burst }
}

/// Sends `burst` requests with `send`, each let through to its `status`, and asserts that the
/// next one is [`assert_rate_limited`].
pub async fn assert_limited_past_the_burst<F, Fut>(burst: u32, status: u16, mut send: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = reqwest::Response>,
{
    for n in 0..burst {
        assert_eq!(send().await.status(), status, "request {n} of the burst");
    }
    assert_rate_limited(send().await).await;
}

/// Sends `request` and reads its JSON body; `None` when there is no answer or no JSON (for
/// checks polled with [`crate::eventually`]).
pub async fn poll_json(request: reqwest::RequestBuilder) -> Option<Value> {
    request.send().await.ok()?.json().await.ok()
}

/// Sends `request` and reads its JSON body, failing the test (naming `what`) when either fails.
pub async fn fetch_json(request: reqwest::RequestBuilder, what: &str) -> Value {
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    response
        .json()
        .await
        .unwrap_or_else(|e| panic!("{what} as JSON: {e}"))
}
