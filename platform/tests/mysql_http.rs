//! docs/database-backends.md: what platform serves over HTTP works on a MySQL database too —
//! the outbox admin (list by status, send one again) and `/readyz`, which names the database
//! `mysql`. Against the machine's MariaDB and Redis, a database per test.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRef;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use platform::http::AdminToken;
use platform::http::health::Readiness;
use platform::http::outbox_admin::{self, OutboxDb};
use platform::messaging::outbox::OutboxSignal;
use platform::storage::Database;
use platform::storage::mysql::MySqlStore;
use platform_mysql::outbox;
use sqlx::ConnectOptions;
use testkit::mysql::TestMySqlDatabase;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/order-service/mysql");

const TOKEN: &str = "test-admin-token";

#[derive(Clone)]
struct State {
    admin: AdminToken,
    outbox: OutboxDb,
}

impl FromRef<State> for AdminToken {
    fn from_ref(state: &State) -> Self {
        state.admin.clone()
    }
}

impl FromRef<State> for OutboxDb {
    fn from_ref(state: &State) -> Self {
        state.outbox.clone()
    }
}

fn admin_routes(db: Database) -> Router {
    Router::new()
        .route("/admin/outbox", get(outbox_admin::list))
        .route("/admin/outbox/{id}/retry", post(outbox_admin::retry))
        .with_state(State {
            admin: AdminToken::new(Some(TOKEN.to_owned())),
            outbox: OutboxDb {
                db,
                signal: OutboxSignal::default(),
            },
        })
}

async fn call(app: &Router, method: &str, uri: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

#[tokio::test]
async fn the_outbox_admin_lists_and_revives_dead_rows_on_mysql() {
    let db = TestMySqlDatabase::create("mysql_admin", &ORDERS).await;
    let (payload, headers) = (serde_json::json!({ "n": 7 }), serde_json::json!({}));
    let event_id = Uuid::now_v7();
    let mut conn = db.pool.acquire().await.expect("connection");
    outbox::insert(
        &mut conn,
        &[outbox::NewRow {
            event_id,
            exchange: "inventory.events",
            routing_key: "nowhere.at.all",
            payload: &payload,
            headers: &headers,
        }],
    )
    .await
    .expect("row");
    drop(conn);
    outbox::record_failure(&db.pool, event_id, 10, "unroutable", Duration::ZERO, true)
        .await
        .expect("dead");
    let app = admin_routes(Database::MySql(MySqlStore(db.pool.clone())));

    let (status, page) = call(&app, "GET", "/admin/outbox?status=dead").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["event_id"], event_id.to_string());
    assert_eq!(items[0]["status"], "dead");
    assert_eq!(items[0]["attempts"], 10);
    assert_eq!(items[0]["payload"], payload);
    let id = items[0]["id"].as_i64().expect("id");

    let (status, row) = call(&app, "POST", &format!("/admin/outbox/{id}/retry")).await;
    assert_eq!(status, StatusCode::OK, "{row}");
    assert_eq!(row["status"], "pending");
    assert_eq!(row["attempts"], 0);
    assert_eq!(row["last_error"], serde_json::Value::Null);
    let (_, page) = call(&app, "GET", "/admin/outbox?status=dead").await;
    assert_eq!(page["items"], serde_json::json!([]));

    let (status, problem) = call(&app, "POST", &format!("/admin/outbox/{}/retry", id + 1)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
}

async fn readiness(db: Database) -> Readiness {
    let redis = platform::storage::redis::connect_with_timeout(
        &testkit::redis_url(),
        None,
        Duration::from_millis(500),
        None,
    )
    .expect("Redis");
    Readiness {
        db,
        redis: Some(redis),
        broker_up: tokio::sync::watch::channel(true).1,
        lock_service: None,
        draining: CancellationToken::new(),
    }
}

#[tokio::test]
async fn readiness_names_the_mysql_database_when_it_does_not_answer() {
    let db = TestMySqlDatabase::create("mysql_ready", &ORDERS).await;
    let up = readiness(Database::MySql(MySqlStore(db.pool.clone()))).await;
    assert_eq!(up.down().await, Vec::<&str>::new());

    // Nothing listens on port 1: the pool's first connection fails.
    let options = platform::storage::mysql::connect_options("mysql://root@127.0.0.1:1/none")
        .expect("a URL")
        .disable_statement_logging();
    let unreachable = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy_with(options);
    let down = readiness(Database::MySql(MySqlStore(unreachable))).await;
    assert_eq!(down.down().await, vec!["mysql"]);
}
