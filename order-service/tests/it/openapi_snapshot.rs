//! `openapi/order-service.json` is generated from the code and committed; this test fails
//! when it is stale. Regenerate with `UPDATE_OPENAPI=1 cargo test -p order-service openapi`.

#[test]
fn the_committed_openapi_document_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/order-service.json");
    let generated = order_service::openapi::spec()
        .to_pretty_json()
        .expect("serialises")
        + "\n";
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(path, &generated).expect("write the document");
        return;
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/order-service.json is stale; run `UPDATE_OPENAPI=1 cargo test -p order-service openapi`"
    );
}
