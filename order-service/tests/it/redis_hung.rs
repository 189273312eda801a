//! A Redis that stops answering (`SIGSTOP`): after one call times out, token requests are
//! answered 503 `not-ready` without asking Redis again, a used token still replays from
//! PostgreSQL, and everything works again once Redis answers — a request whose claim timed
//! out included. A Redis that restarted (every connection broken) refuses nothing.

use std::time::Duration;

use testkit::redis::PrivateRedis;

use crate::helpers::{TestApp, assert_problem, eventually, order_body};

/// Calls of `command` the private Redis has run since its statistics were reset.
async fn calls(redis: &PrivateRedis, command: &str) -> u64 {
    let mut conn = redis.connection().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether `/readyz` names Redis among what is down (the broker is down in these tests).
async fn redis_down_says_readyz(app: &TestApp) -> bool {
    let problem = assert_problem(app.get("/readyz").await, 503, "not-ready").await;
    problem["detail"]
        .as_str()
        .is_some_and(|detail| detail.contains("redis"))
}

#[tokio::test]
async fn token_requests_answer_503_at_once_while_redis_is_stopped_and_work_when_it_answers() {
    let mut redis = PrivateRedis::start().await;
    let url = redis.url.clone();
    let app = TestApp::spawn_with(|c| {
        c.redis_url = url;
        c.redis_timeout = Duration::from_millis(300);
    })
    .await;
    let used = app.issue_token().await;
    let body = order_body(1, 1001, 1);
    let first = app.post_order(&used, &body).await;
    assert_eq!(first.status(), 202);
    let first_body = first.bytes().await.expect("body");
    let unused = app.issue_token().await;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut redis.connection().await)
        .await
        .expect("CONFIG RESETSTAT");

    redis.freeze();
    for _ in 0..10 {
        let refused = app
            .client
            .post(app.url("/idempotency-tokens"))
            .send()
            .await
            .expect("POST /idempotency-tokens");
        assert_eq!(refused.headers()["retry-after"], "1");
        assert_problem(refused, 503, "not-ready").await;
    }
    assert_problem(app.post_order(&unused, &body).await, 503, "not-ready").await;
    let replay = app.post_order(&used, &body).await;
    assert_eq!(
        replay.status(),
        202,
        "a used token is answered from PostgreSQL"
    );
    assert_eq!(replay.bytes().await.expect("body"), first_body);
    assert!(redis_down_says_readyz(&app).await);

    redis.resume();
    // `/readyz` pings on the app's connection: once it is answered, so is everything the
    // app sent while Redis was stopped.
    eventually(Duration::from_secs(10), || async {
        (!redis_down_says_readyz(&app).await).then_some(())
    })
    .await;
    let sent_while_stopped = calls(&redis, "set").await + calls(&redis, "evalsha").await;
    assert!(
        sent_while_stopped <= 1,
        "only the first token request may have waited for Redis: {sent_while_stopped} calls"
    );
    let token = eventually(Duration::from_secs(10), || async {
        let issued = app
            .client
            .post(app.url("/idempotency-tokens"))
            .send()
            .await
            .expect("POST /idempotency-tokens");
        if issued.status() != 201 {
            return None;
        }
        let issued: serde_json::Value = issued.json().await.expect("json");
        issued["token"].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(app.post_order(&token, &body).await.status(), 202);
    assert_eq!(app.post_order(&unused, &body).await.status(), 202);
    assert_eq!(app.count("orders").await, 3);
}

/// A private Redis, the app on it with a short Redis timeout, and the body of the order the
/// app placed once (so Redis has the claim script).
async fn app_with_an_order() -> (PrivateRedis, TestApp, serde_json::Value) {
    let redis = PrivateRedis::start().await;
    let url = redis.url.clone();
    let app = TestApp::spawn_with(|c| {
        c.redis_url = url;
        c.redis_timeout = Duration::from_millis(300);
    })
    .await;
    let body = order_body(1, 1001, 1);
    let token = app.issue_token().await;
    assert_eq!(app.post_order(&token, &body).await.status(), 202);
    // Its outcome is cached after the answer (decision 0065): done before a test freezes
    // Redis, or the frozen write would time out and mark Redis down.
    app.await_cached(&token).await;
    (redis, app, body)
}

#[tokio::test]
async fn a_request_whose_claim_timed_out_is_not_in_progress_once_redis_answers() {
    // Redis has the claim script: the frozen one runs the claim's EVALSHA once thawed.
    let (mut redis, app, body) = app_with_an_order().await;
    let token = app.issue_token().await;

    redis.freeze();
    // The claim is sent and times out; the frozen Redis runs it once it is thawed.
    assert_problem(app.post_order(&token, &body).await, 503, "not-ready").await;
    redis.resume();
    // Answered after what was queued before it: the claim ran, nothing runs its request.
    let state: String = redis::cmd("GET")
        .arg(format!("{}idem:{{{token}}}", app.redis_prefix))
        .query_async(&mut redis.connection().await)
        .await
        .expect("GET");
    assert!(state.starts_with("inflight:"), "{state}");

    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut statuses = Vec::new();
    loop {
        let status = app.post_order(&token, &body).await.status().as_u16();
        statuses.push(status);
        if status == 202 {
            break;
        }
        assert!(tokio::time::Instant::now() < until, "{statuses:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !statuses.contains(&409),
        "no request was running, yet its retries were told it was: {statuses:?}"
    );
    assert_eq!(app.count("orders").await, 2);
}

#[tokio::test]
async fn a_redis_that_restarted_refuses_nothing() {
    let (mut redis, app, body) = app_with_an_order().await;
    let token = app.issue_token().await;
    assert_eq!(app.post_order(&token, &body).await.status(), 202);

    for round in 0..3 {
        redis.restart().await;
        // The first calls after a restart find their connection broken: each is run again
        // on a new one, so neither the requests nor the health check see an outage.
        for _ in 0..3 {
            let issued = app
                .client
                .post(app.url("/idempotency-tokens"))
                .send()
                .await
                .expect("POST /idempotency-tokens");
            assert_eq!(issued.status(), 201, "round {round}");
            let issued: serde_json::Value = issued.json().await.expect("json");
            let token = issued["token"].as_str().expect("a token");
            assert_eq!(
                app.post_order(token, &body).await.status(),
                202,
                "round {round}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // A token issued before the restart is still known by its signature.
        let replay = app.post_order(&token, &body).await;
        assert_eq!(replay.status(), 202, "round {round}");
    }
    assert_eq!(app.count("orders").await, 11);
}
