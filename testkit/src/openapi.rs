//! Checks on a service's OpenAPI document that both services share: the committed copy is the
//! generated one, and the edge's answers and paging rules are documented.

use std::path::Path;

use serde_json::Value;

/// Asserts that the document committed at `path` is `generated`; with `UPDATE_OPENAPI` set,
/// writes `generated` there instead. `package` names the `cargo test -p` that regenerates it.
pub fn assert_committed_document(path: &Path, generated: &str, package: &str) {
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("openapi/ exists");
        std::fs::write(path, generated).expect("the document is written");
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale or missing: run `UPDATE_OPENAPI=1 cargo test -p {package} openapi` and commit it",
        path.display()
    );
}

/// Asserts that `spec` has a `servers` entry and documents the edge's answers on every
/// operation: 500, 503 with `Retry-After`, and 429 with `Retry-After` except on the probes
/// (`/healthz`, `/readyz`, `/metrics`), which declare no 429 at all.
pub fn assert_edge_answers_documented(spec: &Value) {
    assert!(spec["servers"][0]["url"].is_string());
    for (path, item) in spec["paths"].as_object().expect("paths") {
        let probe = ["/healthz", "/readyz", "/metrics"].contains(&path.as_str());
        for (method, operation) in item.as_object().expect("a path item") {
            let responses = &operation["responses"];
            assert!(responses["500"].is_object(), "{method} {path} 500");
            assert!(
                responses["503"]["headers"]["Retry-After"].is_object(),
                "{method} {path} 503 declares Retry-After"
            );
            if probe {
                assert!(
                    responses.get("429").is_none(),
                    "{method} {path} is never limited"
                );
            } else {
                assert!(
                    responses["429"]["headers"]["Retry-After"].is_object(),
                    "{method} {path} 429 declares Retry-After"
                );
            }
        }
    }
}

/// Asserts that the `limit` parameter of `GET path` is an integer of at least 1 with no
/// maximum, described as capped (larger values are accepted and capped, not refused).
pub fn assert_limit_is_capped_not_bounded(spec: &Value, path: &str) {
    let limit = spec["paths"][path]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "limit")
        .expect("limit")
        .clone();
    assert_eq!(limit["schema"]["minimum"], 1, "{limit}");
    assert!(limit["schema"].get("maximum").is_none(), "{limit}");
    assert!(
        limit["description"]
            .as_str()
            .expect("described")
            .contains("capped"),
        "{limit}"
    );
}
