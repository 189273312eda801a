//! The route table and the OpenAPI 3.1 document built from it (from the handlers'
//! annotations, without any connection).

use platform::http::openapi::AdminBearer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use crate::{ops, orders, tokens};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "order-service",
        description = "Takes orders exactly once per idempotency token and settles them with inventory-service through events.",
        license(name = "MIT")
    ),
    tags(
        (name = "orders", description = "Idempotent order creation, lookup, listing, cancellation and payment confirmation"),
        (name = "operations", description = "Health, readiness and metrics"),
    ),
    components(schemas(
        shared::Problem,
        crate::orders::body::OrderBody,
        platform::http::outbox_admin::OutboxStatus
    )),
    modifiers(&AdminBearer, &BearerJwt)
)]
struct ApiDoc;

/// Declares the end users' bearer JWT. Operations list it beside an empty requirement
/// (`security: [{}, {"bearerJwt": []}]`): it is required only when identity is configured,
/// so clients and tools work against a service running without it.
struct BearerJwt;

impl utoipa::Modify for BearerJwt {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearerJwt",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "An end user's JWT (`sub` = the user id), required when the service \
                         runs with AUTH_JWT_SECRET or AUTH_JWKS_URL",
                    ))
                    .build(),
            ),
        );
    }
}

/// Every documented route, before state is attached: `build_app` and [`spec`] both start
/// here, so the document cannot miss a route.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(tokens::routes::issue))
        .routes(routes!(orders::routes::create, orders::routes::list))
        .routes(routes!(orders::routes::get))
        .routes(routes!(orders::routes::cancel::cancel))
        .routes(routes!(orders::routes::confirm::confirm))
        .routes(routes!(platform::http::outbox_admin::list))
        .routes(routes!(platform::http::outbox_admin::retry))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
}

/// The routes and their finished document: the edge's answers (429, 500, 503) are added once
/// every route is in, since a modifier of `ApiDoc` would run before any path exists.
pub fn split() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let (routes, mut spec) = router().split_for_parts();
    platform::http::openapi::EdgeResponses.modify(&mut spec);
    (routes, spec)
}

/// The document alone, as served at `/openapi.json` and committed under `openapi/`.
pub fn spec() -> utoipa::openapi::OpenApi {
    split().1
}
