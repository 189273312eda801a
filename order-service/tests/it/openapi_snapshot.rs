//! `openapi/order-service.json` is generated from the code and committed; this test fails
//! when it is stale. Regenerate with `UPDATE_OPENAPI=1 cargo test -p order-service openapi`.

#[test]
fn the_committed_openapi_document_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/order-service.json");
    let generated = order_service::openapi::spec()
        .to_pretty_json()
        .expect("serialises")
        + "\n";
    testkit::openapi::assert_committed_document(
        std::path::Path::new(path),
        &generated,
        "order-service",
    );
}

/// The document says what the edge does: 429 (except the probes) and 503 with
/// `Retry-After` and 500 on every operation, `Retry-After` on the in-progress 409, the order
/// body as one of its two forms, `limit` a capped integer, and a `servers` entry.
#[test]
fn the_edge_answers_and_the_order_forms_are_documented() {
    let spec = serde_json::to_value(order_service::openapi::spec()).expect("serialises");
    testkit::openapi::assert_edge_answers_documented(&spec);
    let create = &spec["paths"]["/orders"]["post"];
    assert!(create["responses"]["409"]["headers"]["Retry-After"].is_object());
    let forms = &spec["components"]["schemas"]["OrderBody"]["oneOf"];
    assert_eq!(forms.as_array().map(Vec::len), Some(2), "{forms}");
    testkit::openapi::assert_limit_is_capped_not_bounded(&spec, "/orders");
}

/// The end user's JWT is declared, optional on exactly the operations that take it (so tools
/// work against a service without identity), each of which documents its 401; `user_id` is
/// optional in both order forms.
#[test]
fn the_bearer_jwt_is_optional_on_the_protected_operations_and_user_id_in_the_body() {
    let spec = serde_json::to_value(order_service::openapi::spec()).expect("serialises");
    let scheme = &spec["components"]["securitySchemes"]["bearerJwt"];
    assert_eq!(scheme["scheme"], "bearer", "{scheme}");
    assert_eq!(scheme["bearerFormat"], "JWT", "{scheme}");
    let protected = [
        "issue_idempotency_token",
        "create_order",
        "get_order",
        "list_orders",
        "cancel_order",
        "confirm_order",
    ];
    let mut seen = 0;
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let id = operation["operationId"].as_str().unwrap_or_default();
            let optional_jwt = operation["security"] == serde_json::json!([{}, {"bearerJwt": []}]);
            assert_eq!(optional_jwt, protected.contains(&id), "{method} {path}");
            if optional_jwt {
                seen += 1;
                let challenge = &operation["responses"]["401"]["headers"]["WWW-Authenticate"];
                assert!(challenge.is_object(), "{method} {path} documents its 401");
            }
        }
    }
    assert_eq!(seen, protected.len());
    for form in ["ItemsOrder", "FlatOrder"] {
        let schema = &spec["components"]["schemas"][form];
        let required = schema["required"].as_array().expect("required");
        assert!(
            !required.contains(&"user_id".into()),
            "{form}: {required:?}"
        );
        assert_eq!(schema["properties"]["user_id"]["type"], "integer", "{form}");
    }
}
