//! Browsers: `CORS_ALLOWED_ORIGINS` lets pages of the listed origins call the API, with a
//! preflight that needs no token; unset, no CORS header is sent at all.

use platform::http::Cors;
use reqwest::Method;
use reqwest::header::HeaderMap;

use super::{As, secret_identity};
use crate::helpers::TestApp;

const SHOP: &str = "https://shop.example";

async fn cors_app() -> TestApp {
    TestApp::spawn_with(|c| {
        c.identity = secret_identity();
        c.cors = Cors::parse(&format!("{SHOP}, http://localhost:3000")).expect("origins");
    })
    .await
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn listed(headers: &HeaderMap, name: &str) -> Vec<String> {
    header(headers, name)
        .split(',')
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .collect()
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_without_a_token() {
    let app = cors_app().await;
    let response = app
        .client
        .request(Method::OPTIONS, app.url("/orders"))
        .header("origin", SHOP)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, idempotency-key, content-type",
        )
        .send()
        .await
        .expect("preflight");
    assert!(response.status().is_success(), "{}", response.status());
    let headers = response.headers();
    assert_eq!(header(headers, "access-control-allow-origin"), SHOP);
    assert_eq!(
        listed(headers, "access-control-allow-methods"),
        ["get", "post"]
    );
    assert_eq!(
        listed(headers, "access-control-allow-headers"),
        ["authorization", "idempotency-key", "content-type"]
    );
    assert!(!headers.contains_key("access-control-allow-credentials"));
    assert!(headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn answers_to_an_allowed_origin_expose_what_clients_read_even_refusals() {
    let app = cors_app().await;
    let key = As::user(&app, 7).token().await;
    let response = app
        .client
        .post(app.url("/orders"))
        .header("origin", SHOP)
        .bearer_auth(super::token_of(7))
        .header("idempotency-key", &key)
        .json(&super::my_order(1001, 1))
        .send()
        .await
        .expect("order");
    assert_eq!(response.status(), 202);
    let headers = response.headers();
    assert_eq!(header(headers, "access-control-allow-origin"), SHOP);
    assert_eq!(
        listed(headers, "access-control-expose-headers"),
        [
            "location",
            "idempotent-replayed",
            "retry-after",
            "x-request-id"
        ]
    );
    assert!(!headers.contains_key("access-control-allow-credentials"));
    // A page can read why it was refused, too.
    let refused = app
        .client
        .get(app.url("/orders"))
        .header("origin", SHOP)
        .send()
        .await
        .expect("list");
    assert_eq!(refused.status(), 401);
    assert_eq!(
        header(refused.headers(), "access-control-allow-origin"),
        SHOP
    );
}

#[tokio::test]
async fn another_origin_is_not_allowed() {
    let app = cors_app().await;
    for method in [Method::OPTIONS, Method::GET] {
        let response = app
            .client
            .request(method.clone(), app.url("/healthz"))
            .header("origin", "https://evil.example")
            .header("access-control-request-method", "GET")
            .send()
            .await
            .expect("request");
        assert!(
            !response
                .headers()
                .contains_key("access-control-allow-origin"),
            "{method}"
        );
    }
}

#[tokio::test]
async fn without_allowed_origins_no_cors_header_is_sent_and_options_stays_405() {
    let app = TestApp::spawn().await;
    let preflight = app
        .client
        .request(Method::OPTIONS, app.url("/orders"))
        .header("origin", SHOP)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("preflight");
    assert_eq!(preflight.status(), 405);
    let response = app
        .client
        .get(app.url("/healthz"))
        .header("origin", SHOP)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 200);
    assert!(
        !response
            .headers()
            .keys()
            .any(|name| name.as_str().starts_with("access-control-"))
    );
}
