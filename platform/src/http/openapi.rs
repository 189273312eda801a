//! What the edge adds to every operation of a service's OpenAPI document, so the document
//! says what the services do: rate limits (429), overload and unreadiness (503), and the
//! 500 every handler can answer; plus a `servers` entry. And the admin bearer scheme both
//! services' admin operations refer to.

use utoipa::Modify;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{
    ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder, header::HeaderBuilder,
};

use super::rate_limit;

const PROBLEM: &str = "application/problem+json";

/// Declares `admin_token`: `Authorization: Bearer <ADMIN_TOKEN>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdminBearer;

impl Modify for AdminBearer {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "`Authorization: Bearer <ADMIN_TOKEN>`; admin endpoints answer 401 without it"
                .to_owned(),
        );
        components.add_security_scheme("admin_token", SecurityScheme::Http(bearer));
    }
}

/// Adds the edge's answers to every operation that does not document them itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeResponses;

impl Modify for EdgeResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        openapi.servers = Some(vec![
            Server::builder()
                .url("/")
                .description(Some("the server this document is served from"))
                .build(),
        ]);
        for (path, item) in openapi.paths.paths.iter_mut() {
            let limited = !rate_limit::EXEMPT.contains(&path.as_str());
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                add_edge_responses(operation, limited);
            }
        }
    }
}

fn add_edge_responses(operation: &mut Operation, limited: bool) {
    let responses = &mut operation.responses.responses;
    if limited {
        responses.entry("429".into()).or_insert_with(|| {
            problem(
                "`rate-limited`: this client sent more than `RATE_LIMIT_PER_SEC` allows \
                 (after a burst of `RATE_LIMIT_BURST`); retry after `Retry-After`",
                true,
            )
        });
    }
    responses.entry("500".into()).or_insert_with(|| {
        problem(
            "`internal`: an unexpected failure; the cause is logged, never sent",
            false,
        )
    });
    responses.entry("503".into()).or_insert_with(|| {
        problem(
            "`busy` (every database connection stayed taken) or `not-ready` (a backing \
             system is down, or the request outran `REQUEST_TIMEOUT_SECS`); nothing was \
             changed, retry after `Retry-After`",
            true,
        )
    });
    // Handlers that document their own 429 or 503 still get the edge's `Retry-After` on it.
    for status in ["429", "503"] {
        if let Some(RefOr::T(response)) = responses.get_mut(status) {
            response
                .headers
                .entry("Retry-After".into())
                .or_insert_with(retry_after_header);
        }
    }
}

/// A problem+json response; with `retry_after`, it declares the `Retry-After` header.
pub fn problem(description: &str, retry_after: bool) -> RefOr<Response> {
    let mut response = ResponseBuilder::new().description(description).content(
        PROBLEM,
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build(),
    );
    if retry_after {
        response = response.header("Retry-After", retry_after_header());
    }
    RefOr::T(response.build())
}

/// `Retry-After` in whole seconds (RFC 9110 §10.2.3).
pub fn retry_after_header() -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1)),
        )
        .description(Some("Seconds to wait before sending the request again"))
        .build()
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem, PathsBuilder};
    use utoipa::openapi::{OpenApiBuilder, ResponsesBuilder};

    use super::*;

    #[test]
    fn every_operation_gets_500_and_503_and_all_but_probes_get_429() {
        let ok = || {
            OperationBuilder::new()
                .responses(
                    ResponsesBuilder::new()
                        .response("200", ResponseBuilder::new().description("ok").build()),
                )
                .build()
        };
        let mut openapi = OpenApiBuilder::new()
            .paths(
                PathsBuilder::new()
                    .path("/things", PathItem::new(HttpMethod::Get, ok()))
                    .path("/healthz", PathItem::new(HttpMethod::Get, ok())),
            )
            .build();
        EdgeResponses.modify(&mut openapi);
        let json = serde_json::to_value(&openapi).unwrap_or_default();
        let things = &json["paths"]["/things"]["get"]["responses"];
        let probe = &json["paths"]["/healthz"]["get"]["responses"];
        for status in ["429", "500", "503"] {
            assert!(things.get(status).is_some(), "{status} on /things");
        }
        assert!(things["429"]["headers"].get("Retry-After").is_some());
        assert!(probe.get("429").is_none());
        assert!(probe["503"]["headers"].get("Retry-After").is_some());
        assert!(probe.get("503").is_some());
        assert_eq!(json["servers"][0]["url"], "/");
    }
}
