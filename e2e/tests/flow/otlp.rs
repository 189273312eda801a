//! OTLP trace export. Both services run as processes configured only by the standard `OTEL_*`
//! variables and export to a receiver this test runs, over OTLP/HTTP (the default; the
//! receiver decodes the real protobuf payload) or OTLP/gRPC. An order placed with the client's `traceparent` makes one trace whose
//! spans come from both services, each hop the child of the one before it across the broker.
//! The scheduled export is an hour away, so the spans arrive only because shutdown flushes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::json;
use testkit::{KilledOnDrop, TestDatabase, TestVhost, eventually, signal};
use tonic::transport::server::TcpIncoming;

use crate::helpers::{ADMIN, SETTLE, create_product};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// A span as received: the `service.name` of its resource, and its ids in hex.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    kind: SpanKind,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// `POST /v1/traces` of OTLP/HTTP with a protobuf body.
async fn receive(State(spans): State<Spans>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    keep(&spans, request);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

/// The `TraceService` of OTLP/gRPC.
struct GrpcReceiver(Spans);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn keep(spans: &Spans, request: ExportTraceServiceRequest) {
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            received.push(Received {
                service: service.clone(),
                kind: span.kind(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
            });
        }
    }
    if let Ok(mut spans) = spans.lock() {
        spans.extend(received);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A receiver speaking `protocol` (`OTEL_EXPORTER_OTLP_PROTOCOL`): its endpoint and what it got.
async fn start_receiver(protocol: &str) -> (String, Spans) {
    let spans = Spans::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("its address");
    if protocol == "grpc" {
        let service = TraceServiceServer::new(GrpcReceiver(spans.clone()));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpIncoming::from(listener)),
        );
    } else {
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(spans.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
    }
    (format!("http://{addr}"), spans)
}

/// A service process exporting to `endpoint`, ready to serve.
async fn start(
    binary: &str,
    db: &TestDatabase,
    vhost: &TestVhost,
    endpoint: &str,
    protocol: &str,
    env: &[(&str, String)],
) -> (KilledOnDrop, String) {
    let port = testkit::free_port();
    let mut command = testkit::service_command_on(port, binary, &db.url, &vhost.url);
    command
        .env("ADMIN_TOKEN", ADMIN)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_BSP_SCHEDULE_DELAY", "3600000");
    for (name, value) in env {
        command.env(name, value);
    }
    let child = KilledOnDrop(command.spawn().expect("the service starts"));
    let base = format!("http://127.0.0.1:{port}");
    testkit::wait_until_ok(&format!("{base}/readyz")).await;
    (child, base)
}

/// SIGTERM, then the exit status once the process ended (it flushes its spans on the way).
async fn stop(mut child: KilledOnDrop) -> std::process::ExitStatus {
    signal(&child, "TERM");
    eventually(Duration::from_secs(30), || {
        let exited = child.try_wait().ok().flatten();
        async move { exited }
    })
    .await
}

async fn place_order(client: &reqwest::Client, orders: &str) -> String {
    let token =
        testkit::fetch_json(client.post(format!("{orders}/idempotency-tokens")), "token").await;
    let order = client
        .post(format!("{orders}/orders"))
        .header("idempotency-key", token["token"].as_str().expect("token"))
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .json(&json!({"user_id": 1, "items": [{"product_id": 1001, "quantity": 2}], "amount": "2.00"}));
    let order = testkit::fetch_json(order, "order").await;
    order["order_id"].as_str().expect("order id").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_order_is_one_exported_trace_across_both_services() {
    one_order_is_one_trace_over("http/protobuf").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_order_is_one_trace_exported_over_grpc_too() {
    one_order_is_one_trace_over("grpc").await;
}

async fn one_order_is_one_trace_over(protocol: &str) {
    let (endpoint, spans) = start_receiver(protocol).await;
    let vhost = TestVhost::create();
    let order_db = TestDatabase::create("e2e_otlp_orders", &order_service::MIGRATOR).await;
    let inventory_db =
        TestDatabase::create("e2e_otlp_inventory", &inventory_service::MIGRATOR).await;
    let (inventory, inventory_base) = start(
        env!("CARGO_BIN_EXE_inventory-service-process"),
        &inventory_db,
        &vhost,
        &endpoint,
        protocol,
        &[],
    )
    .await;
    let (orders, orders_base) = start(
        env!("CARGO_BIN_EXE_order-service-process"),
        &order_db,
        &vhost,
        &endpoint,
        protocol,
        &[("INVENTORY_URL", inventory_base.clone())],
    )
    .await;
    let client = reqwest::Client::new();
    create_product(&client, &inventory_base, 1001, 10).await;
    let order_id = place_order(&client, &orders_base).await;
    eventually(SETTLE, || async {
        let order =
            testkit::poll_json(client.get(format!("{orders_base}/orders/{order_id}"))).await?;
        (order["status"] == "CONFIRMED").then_some(())
    })
    .await;
    assert!(stop(orders).await.success());
    assert!(stop(inventory).await.success());

    let spans: Vec<Received> = spans
        .lock()
        .map(|s| {
            s.iter()
                .filter(|s| s.trace_id == TRACE_ID)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let by_id: HashMap<&str, &Received> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    // Client -> order-service request -> its publish -> inventory's consume -> its publish ->
    // order-service's consume: each span the child of the one before.
    let hops = [
        ("order-service", SpanKind::Server),
        ("order-service", SpanKind::Producer),
        ("inventory-service", SpanKind::Consumer),
        ("inventory-service", SpanKind::Producer),
        ("order-service", SpanKind::Consumer),
    ];
    let mut parent = CLIENT_SPAN.to_owned();
    for (service, kind) in hops {
        let hop = spans
            .iter()
            .find(|s| s.parent_span_id == parent && s.service == service && s.kind == kind)
            .unwrap_or_else(|| {
                panic!(
                    "no {kind:?} span of {service} under {parent} ({:?}); trace: {spans:#?}",
                    by_id.get(parent.as_str()).map(|p| &p.name)
                )
            });
        parent = hop.span_id.clone();
    }
}
