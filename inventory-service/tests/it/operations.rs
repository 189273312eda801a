//! Health, readiness, metrics, the OpenAPI document and the edge's 404/405/request ids.

use std::time::Duration;

use serde_json::Value;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem, eventually};

testkit::on_each_backend!(
    healthz_answers_and_readyz_turns_ready_once_every_backing_system_answers,
    every_lock_and_deduction_metric_is_exposed,
    the_openapi_document_describes_every_endpoint_and_the_docs_are_served,
    unknown_routes_and_wrong_methods_are_problems_and_request_ids_are_echoed,
);

async fn healthz_answers_and_readyz_turns_ready_once_every_backing_system_answers(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let health = app.get("/healthz").await;
    assert_eq!(health.status(), 200);
    eventually(Duration::from_secs(20), || async {
        let response = app.anonymous.get(app.url("/readyz")).send().await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
}

async fn every_lock_and_deduction_metric_is_exposed(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 1).await;
    assert_eq!(app.deduct("d", &[(1, 1)]).await.status(), 200);
    let text = app.metrics().await;
    for series in [
        r#"lock_acquisitions_total{result="acquired",backend="redis"}"#,
        r#"lock_acquisitions_total{result="timeout",backend="redis"}"#,
        r#"lock_acquisitions_total{result="lost",backend="redis"}"#,
        r#"lock_acquisitions_total{result="bypassed",backend="redis"}"#,
        r#"lock_renewals_total{backend="redis"}"#,
        "deduction_version_conflicts_total",
        r#"lock_wait_seconds_bucket{backend="redis","#,
        r#"deductions_total{result="applied"}"#,
        "http_requests_total",
    ] {
        assert!(text.contains(series), "missing {series}");
    }
}

async fn the_openapi_document_describes_every_endpoint_and_the_docs_are_served(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let spec: Value = app.get("/openapi.json").await.json().await.expect("json");
    assert!(
        spec["openapi"]
            .as_str()
            .unwrap_or_default()
            .starts_with("3.1")
    );
    for (path, method) in [
        ("/products", "post"),
        ("/products", "get"),
        ("/products/{product_id}", "get"),
        ("/products/{product_id}/restock", "post"),
        ("/deductions", "post"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    ] {
        assert!(
            spec["paths"][path][method].is_object(),
            "{method} {path} is documented"
        );
    }
    assert_eq!(
        spec["components"]["securitySchemes"]["admin_token"]["scheme"],
        "bearer"
    );
    for schema in [
        "Problem",
        "Product",
        "CreateProduct",
        "RestockBody",
        "DeductionBody",
        "DeductionApplied",
    ] {
        assert!(
            spec["components"]["schemas"][schema].is_object(),
            "schema {schema}"
        );
    }
    let docs = app.get("/docs/").await;
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.expect("html").contains("swagger"));
}

async fn unknown_routes_and_wrong_methods_are_problems_and_request_ids_are_echoed(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let response = app.get("/nowhere").await;
    assert!(response.headers().contains_key("x-request-id"));
    assert_problem(response, 404, "not-found").await;
    let response = app
        .anonymous
        .delete(app.url("/products"))
        .send()
        .await
        .expect("DELETE");
    assert_problem(response, 405, "method-not-allowed").await;
    let response = app
        .anonymous
        .put(app.url("/deductions"))
        .send()
        .await
        .expect("PUT");
    assert_problem(response, 405, "method-not-allowed").await;
    let response = app
        .anonymous
        .get(app.url("/healthz"))
        .header("x-request-id", "req-123")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        response.headers().get("x-request-id").map(|v| v.as_bytes()),
        Some(&b"req-123"[..])
    );
}
