//! The OpenAPI document, built without any connection: complete, consistent, and equal to
//! the committed copy.

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::Value;

fn spec() -> Value {
    serde_json::to_value(inventory_service::openapi::spec()).expect("the spec serialises")
}

#[test]
fn every_operation_has_a_unique_id_and_admin_operations_declare_the_bearer_token() {
    let spec = spec();
    let mut ids = HashSet::new();
    let admin = [
        "create_product",
        "restock_product",
        "create_deduction",
        "create_hold",
        "get_hold",
        "confirm_hold",
        "cancel_hold",
        "list_outbox_rows",
        "retry_outbox_row",
    ];
    let with_body = [
        "create_product",
        "restock_product",
        "create_deduction",
        "create_hold",
    ];
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let id = operation["operationId"].as_str().expect("an operationId");
            assert!(ids.insert(id.to_owned()), "operationId {id} is used twice");
            assert!(
                operation["summary"].is_string(),
                "{method} {path} has a summary"
            );
            // Reservations need the admin token only with RESERVATIONS_REQUIRE_ADMIN, so it
            // is optional in the document: `[{}, {"admin_token": []}]`.
            if id == "get_reservation" {
                assert_eq!(
                    operation["security"],
                    serde_json::json!([{}, {"admin_token": []}]),
                    "{method} {path} security"
                );
                assert!(
                    operation["responses"]["401"].is_object(),
                    "{method} {path} 401"
                );
                continue;
            }
            let secured = operation["security"]
                .as_array()
                .is_some_and(|s| !s.is_empty());
            assert_eq!(secured, admin.contains(&id), "{method} {path} security");
            if secured {
                assert!(
                    operation["responses"]["401"].is_object(),
                    "{method} {path} documents 401"
                );
                assert!(
                    !with_body.contains(&id) || operation["responses"]["422"].is_object(),
                    "{method} {path} documents 422"
                );
            }
        }
    }
    assert_eq!(ids.len(), 15);
}

/// `openapi/inventory-service.json` at the workspace root; `UPDATE_OPENAPI=1` rewrites it.
#[test]
fn the_committed_openapi_document_matches_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../openapi/inventory-service.json");
    let generated = inventory_service::openapi::spec_json().expect("the spec serialises") + "\n";
    testkit::openapi::assert_committed_document(&path, &generated, "inventory-service");
}

/// What the edge answers is documented on every operation: 429 (except the probes) and 503
/// with `Retry-After`, 500; `limit` is a capped integer, not a bounded one; a `servers` entry.
#[test]
fn the_edge_answers_and_paging_rules_are_documented() {
    let spec = spec();
    testkit::openapi::assert_edge_answers_documented(&spec);
    testkit::openapi::assert_limit_is_capped_not_bounded(&spec, "/products");
}
