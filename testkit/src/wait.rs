//! Waiting for a condition with a deadline.

/// Polls `check` until it returns `Some`, and fails the test once `deadline` has passed.
/// Tests wait for conditions this way, never by sleeping a fixed time.
pub async fn eventually<T, F, Fut>(deadline: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "condition not met within {deadline:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits up to 30 s until `GET url` answers 200 (a process starting up: `/healthz`, `/readyz`).
pub async fn wait_until_ok(url: &str) {
    let client = reqwest::Client::new();
    eventually(std::time::Duration::from_secs(30), || async {
        let response = client.get(url).send().await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
}
