//! The OpenAPI 3.1 document: the routes register their own paths (see [`crate::routes::api`]);
//! this adds the title, tags, the admin bearer scheme and the shared schemas.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "inventory-service",
        description = "Owns products and stock. Stock is deducted under a per-product Redis lock and a \
            conditional SQL update. Every error is RFC 9457 `application/problem+json`; `type` ends in \
            the slug clients branch on.",
    ),
    tags(
        (name = "products", description = "The catalogue and its stock"),
        (name = "deductions", description = "Synchronous, idempotent stock deductions"),
        (name = "reservations", description = "What happened to each order's stock"),
        (name = "operations", description = "Health, readiness and metrics"),
    ),
    components(schemas(
        shared::Problem,
        shared::events::LineItem,
        platform::http::outbox_admin::OutboxStatus
    )),
    modifiers(&AdminBearer),
)]
pub struct ApiDoc;

/// Declares `admin_token`: `Authorization: Bearer <ADMIN_TOKEN>`.
#[derive(Debug)]
struct AdminBearer;

impl Modify for AdminBearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "`Authorization: Bearer <ADMIN_TOKEN>`; admin endpoints answer 401 without it"
                .to_owned(),
        );
        components.add_security_scheme("admin_token", SecurityScheme::Http(bearer));
    }
}

/// The whole document, built without any connection.
pub fn spec() -> utoipa::openapi::OpenApi {
    crate::routes::split().1
}

/// The document as pretty JSON, as committed under `openapi/`.
pub fn spec_json() -> anyhow::Result<String> {
    Ok(spec().to_pretty_json()?)
}
