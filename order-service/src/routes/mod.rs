//! HTTP routes. Handlers are thin: parse, call the domain or the database, shape the answer.

mod ops;
mod order_body;
mod orders;
mod tokens;

pub use order_body::OrderBody;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// Every documented route; `openapi::spec` and `build_app` both start here.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(tokens::issue))
        .routes(routes!(orders::create, orders::list))
        .routes(routes!(orders::get))
        .routes(routes!(orders::cancel))
        .routes(routes!(platform::http::outbox_admin::list))
        .routes(routes!(platform::http::outbox_admin::retry))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
}
