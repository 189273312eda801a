//! The OpenAPI 3.1 document and the route table: every route is registered here through
//! `utoipa-axum` ([`api`]), so the document cannot miss one; [`ApiDoc`] adds the title, tags,
//! the admin bearer scheme and the shared schemas. Handlers live with their capability
//! ([`crate::products::routes`], [`crate::deductions::routes`], [`crate::holds::routes`],
//! [`crate::reservations::routes`], [`crate::health`]).

use axum::Router;
use platform::http::openapi::AdminBearer;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use crate::{deductions, health, holds, products, reservations};

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
        (name = "holds", description = "Stock held until confirmed, cancelled or expired (try / confirm / cancel)"),
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

/// Every documented route, without state: also what [`spec`] is made from.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(products::routes::create, products::routes::list))
        .routes(routes!(products::routes::get))
        .routes(routes!(products::routes::restock))
        .routes(routes!(deductions::routes::create))
        .routes(routes!(holds::routes::create))
        .routes(routes!(holds::routes::get))
        .routes(routes!(holds::routes::confirm))
        .routes(routes!(holds::routes::cancel))
        .routes(routes!(reservations::routes::get))
        .routes(routes!(platform::http::outbox_admin::list))
        .routes(routes!(platform::http::outbox_admin::retry))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
}

/// The routes and their finished document: the edge's answers (429, 500, 503) are added once
/// every route is in, since a modifier of `ApiDoc` would run before any path exists.
pub fn split() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (routes, mut spec) = api().split_for_parts();
    platform::http::openapi::EdgeResponses.modify(&mut spec);
    (routes, spec)
}

/// The whole document, built without any connection.
pub fn spec() -> utoipa::openapi::OpenApi {
    split().1
}

/// The document as pretty JSON, as committed under `openapi/`.
pub fn spec_json() -> anyhow::Result<String> {
    Ok(spec().to_pretty_json()?)
}
