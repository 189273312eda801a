//! Thin HTTP handlers: parse, call the flow or the queries, map to a response. Every route is
//! registered through `utoipa-axum`, so the OpenAPI document cannot miss one.

use axum::Router;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::openapi::ApiDoc;
use crate::state::AppState;

pub mod deductions;
pub mod health;
pub mod products;
pub mod reservations;

/// Every documented route, without state: also what [`crate::openapi::spec`] is made from.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(products::create, products::list))
        .routes(routes!(products::get))
        .routes(routes!(products::restock))
        .routes(routes!(deductions::create))
        .routes(routes!(reservations::get))
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

/// The routed API plus `/openapi.json` and the Swagger UI at `/docs`.
pub fn router(state: AppState) -> Router {
    let (router, spec) = split();
    router
        .merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .with_state(state)
}
