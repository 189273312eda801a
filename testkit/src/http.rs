//! HTTP checks tests share: a metric scraped from `/metrics`, settings a service must refuse,
//! credentials an admin route must refuse.

use crate::{expect_refused_start, free_port, redis_prefix, service_command};

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

/// Starts the service `binary` once per `(variable, value)` of `refused`, on `database_url`, and
/// asserts that each start is refused with a message naming the variable. An `AMQP_URLS` stands
/// in for the command's `AMQP_URL` (both together are refused whatever they say).
pub async fn assert_each_setting_refused(
    binary: &'static str,
    database_url: &str,
    refused: &[(&'static str, &'static str)],
) {
    for &(name, value) in refused {
        let mut command = service_command(
            binary,
            database_url,
            "amqp://guest:guest@127.0.0.1:1/%2f",
            &redis_prefix(),
        );
        command
            .env("HTTP_ADDR", format!("127.0.0.1:{}", free_port()))
            .env(name, value);
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
    }
}

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
