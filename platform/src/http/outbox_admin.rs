//! Operator endpoints over the outbox (both services): list rows by status (dead ones are
//! those that exhausted their retries) and send one again.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::Problem;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::pagination::{self, Page};
use super::{AdminAuth, Json, Path, Query};
use crate::messaging::outbox::OutboxSignal;
use crate::storage::Database;

/// What the admin endpoints need; services provide it with `FromRef`.
#[derive(Debug, Clone)]
pub struct OutboxDb {
    pub db: Database,
    /// Wakes this instance's relay after a retry.
    pub signal: OutboxSignal,
}

/// One outbox row as operators see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct OutboxEntry {
    pub id: i64,
    /// Also the AMQP `message_id`.
    pub event_id: Uuid,
    pub exchange: String,
    pub routing_key: String,
    pub status: OutboxStatus,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    /// The event envelope as it is published.
    pub payload: serde_json::Value,
}

/// The states an outbox row can be in: `pending` (waiting for the relay), `sent`, or `dead`
/// (out of attempts).
// CHECK-ed text in the table, read into this enum strictly (an unknown value fails the read).
// The relay's statements name them as literals (`status = 'pending'`): that is what lets
// PostgreSQL use the partial index of pending rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[schema(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum OutboxStatus {
    Dead,
    Pending,
    Sent,
}

impl OutboxStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Dead => "dead",
            Self::Pending => "pending",
            Self::Sent => "sent",
        }
    }

    /// The `status` filter as a client writes it.
    fn parse(raw: &str) -> Option<Self> {
        match raw {
            "dead" => Some(Self::Dead),
            "pending" => Some(Self::Pending),
            "sent" => Some(Self::Sent),
            _ => None,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// `dead` (default), `pending` or `sent`.
    #[param(value_type = Option<OutboxStatus>)]
    status: Option<String>,
    /// Page size: default 20; values above 100 are accepted and capped to 100; 0, negative or
    /// non-numeric values are refused with 422.
    #[param(value_type = Option<i64>, minimum = 1, example = 20)]
    limit: Option<String>,
    /// An opaque cursor: the `next` of the previous page, passed back unchanged.
    after: Option<String>,
}

/// List outbox rows by status
#[utoipa::path(
    get, path = "/admin/outbox", operation_id = "list_outbox_rows", tag = "operations",
    params(OutboxQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "One page of rows, oldest first", body = inline(Page<OutboxEntry>)),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad status, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    _: AdminAuth,
    State(OutboxDb { db, .. }): State<OutboxDb>,
    Query(query): Query<OutboxQuery>,
) -> Result<Json<Page<OutboxEntry>>, Problem> {
    let status = match query.status.as_deref() {
        None => OutboxStatus::Dead,
        Some(raw) => OutboxStatus::parse(raw)
            .ok_or_else(|| Problem::validation("status must be dead, pending or sent"))?,
    };
    let limit = pagination::limit(query.limit.as_deref())?;
    let after = match query.after.as_deref() {
        None => 0,
        Some(raw) => raw.parse::<i64>().map_err(|_| {
            Problem::validation(format!("after {raw:?} is not a cursor this API returned"))
        })?,
    };
    let rows = list_rows(&db, status, after, limit + 1)
        .await
        .map_err(internal)?;
    Ok(Json(Page::from_rows(rows, limit, |r| r.id.to_string())))
}

/// Send an outbox row again
///
/// Puts the row back in the queue with a fresh attempt budget; the relay publishes it
/// within milliseconds. Consumers deduplicate by event id, so re-sending is always safe.
#[utoipa::path(
    post, path = "/admin/outbox/{id}/retry", operation_id = "retry_outbox_row", tag = "operations",
    params(("id" = i64, Path, description = "The outbox row's id")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The row, pending again", body = OutboxEntry),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such row", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn retry(
    _: AdminAuth,
    State(OutboxDb { db, signal }): State<OutboxDb>,
    Path(id): Path<i64>,
) -> Result<Json<OutboxEntry>, Problem> {
    let row = retry_row(&db, id).await.map_err(internal)?;
    let row = row.ok_or_else(|| Problem::not_found(format!("outbox row {id} not found")))?;
    signal.wake();
    Ok(Json(row))
}

/// Up to `limit` rows of `status` with ids above `after`, by id.
async fn list_rows(
    db: &Database,
    status: OutboxStatus,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<OutboxEntry>> {
    match db {
        Database::Postgres(pool) => {
            sqlx::query_as!(
                OutboxEntry,
                r#"SELECT id, event_id, exchange, routing_key, status AS "status: OutboxStatus",
                          attempts, next_attempt_at, last_error, created_at, sent_at, payload
                   FROM outbox WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3"#,
                status as OutboxStatus,
                after,
                limit,
            )
            .fetch_all(pool)
            .await
        }
        Database::MySql(store) => {
            platform_mysql::admin::list(&store.0, status.as_str(), after, limit)
                .await?
                .into_iter()
                .map(OutboxEntry::try_from)
                .collect()
        }
    }
}

/// Row `id` pending again with a fresh attempt budget, or `None` when there is no such row.
async fn retry_row(db: &Database, id: i64) -> sqlx::Result<Option<OutboxEntry>> {
    match db {
        Database::Postgres(pool) => {
            sqlx::query_as!(
                OutboxEntry,
                r#"UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(),
                        last_error = NULL, updated_at = now()
                 WHERE id = $1
                 RETURNING id, event_id, exchange, routing_key, status AS "status: OutboxStatus",
                           attempts, next_attempt_at, last_error, created_at, sent_at, payload"#,
                id,
            )
            .fetch_optional(pool)
            .await
        }
        Database::MySql(store) => platform_mysql::admin::retry(&store.0, id)
            .await?
            .map(OutboxEntry::try_from)
            .transpose(),
    }
}

impl TryFrom<platform_mysql::admin::Entry> for OutboxEntry {
    type Error = sqlx::Error;

    /// A MySQL row; its status is read as strictly as PostgreSQL's.
    fn try_from(row: platform_mysql::admin::Entry) -> sqlx::Result<Self> {
        let status = OutboxStatus::parse(&row.status).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown outbox status {:?}", row.status).into())
        })?;
        Ok(Self {
            id: row.id,
            event_id: row.event_id,
            exchange: row.exchange,
            routing_key: row.routing_key,
            status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error,
            created_at: row.created_at,
            sent_at: row.sent_at,
            payload: row.payload,
        })
    }
}

/// A saturated pool is overload (503 `busy`; the edge adds `Retry-After`); anything else is
/// logged and answered 500 without detail.
fn internal(error: sqlx::Error) -> Problem {
    if matches!(error, sqlx::Error::PoolTimedOut) {
        tracing::warn!("outbox admin request refused as busy: the database pool is exhausted");
        return Problem::busy("the database is busy; retry shortly");
    }
    tracing::error!(%error, "outbox admin query failed");
    Problem::internal()
}
