//! The transactional outbox: events are written as rows inside the business transaction and
//! published by the relay after commit, so an event exists if and only if its change does.
//!
//! Both services own an `outbox` table of the same shape (see their migrations).

use crate::storage::Conn;
use serde::Serialize;
use shared::events::{Envelope, Event};

use crate::telemetry::TraceContext;

/// How this process's writers reach its relay, right after they committed outbox rows.
/// Cheap to clone.
///
/// [`OutboxSignal::committed`] hands the relay the rows themselves: it publishes them as they
/// are, without reading them back, and marks them sent afterwards (see
/// [`crate::messaging::relay`]). [`OutboxSignal::wake`] only asks it to look in the table now,
/// for rows this process did not write (an operator's retry).
#[derive(Debug, Clone, Default)]
pub struct OutboxSignal(std::sync::Arc<Signal>);

#[derive(Debug, Default)]
struct Signal {
    notify: tokio::sync::Notify,
    handed: std::sync::Mutex<Handoff>,
}

/// What the relay finds when it looks: rows handed to it, when each was handed, and whether
/// someone asked it to look in the table.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    pub(crate) rows: Vec<(tokio::time::Instant, NewOutboxRow)>,
    pub(crate) look: bool,
}

impl Handoff {
    /// The rows handed over, and a wake counted as one.
    pub(crate) fn len(&self) -> usize {
        self.rows.len() + usize::from(self.look)
    }
}

/// Rows waiting for the relay beyond which more handed rows are dropped (a broker away for
/// long): they are in the table, and the relay's sweep sends them.
pub const HANDOFF_LIMIT: usize = 10_000;

impl OutboxSignal {
    /// Rows this process has just committed, for its relay to publish. Call after the commit
    /// (before it, the relay could publish an event whose change then rolls back).
    pub fn committed(&self, rows: impl IntoIterator<Item = NewOutboxRow>) {
        let now = tokio::time::Instant::now();
        let mut handed = self.0.handed.lock().unwrap_or_else(|e| e.into_inner());
        let room = HANDOFF_LIMIT.saturating_sub(handed.rows.len());
        let before = handed.rows.len();
        handed
            .rows
            .extend(rows.into_iter().take(room).map(|row| (now, row)));
        if handed.rows.len() > before {
            drop(handed);
            self.0.notify.notify_one();
        }
    }

    /// Asks the relay to run its sweep now (rows tried before, or old enough; see
    /// [`crate::messaging::relay`]).
    pub fn wake(&self) {
        self.0.handed.lock().unwrap_or_else(|e| e.into_inner()).look = true;
        self.0.notify.notify_one();
    }

    /// Resolves at the next hand-off or wake (or at once if one happened since the last wait).
    pub async fn woken(&self) {
        self.0.notify.notified().await;
    }

    /// How many rows (and a wake as one) wait for the relay now.
    pub(crate) fn waiting(&self) -> usize {
        self.0
            .handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Takes what was handed over since the last call.
    pub(crate) fn take(&self) -> Handoff {
        std::mem::take(&mut *self.0.handed.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An outbox row about to be written: the envelope serialised, its routing key, and the trace
/// context that rides along as AMQP headers.
#[derive(Debug, Clone)]
pub struct NewOutboxRow {
    pub event_id: uuid::Uuid,
    pub exchange: String,
    pub routing_key: &'static str,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
}

impl NewOutboxRow {
    /// The row as MySQL's statement takes it.
    pub fn as_mysql(&self) -> platform_mysql::outbox::NewRow<'_> {
        platform_mysql::outbox::NewRow {
            event_id: self.event_id,
            exchange: &self.exchange,
            routing_key: self.routing_key,
            payload: &self.payload,
            headers: &self.headers,
        }
    }

    pub fn new<E: Event + Serialize>(
        exchange: &str,
        envelope: &Envelope<E>,
        trace: &TraceContext,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            event_id: envelope.event_id,
            exchange: exchange.to_owned(),
            routing_key: envelope.event.routing_key(),
            payload: serde_json::to_value(envelope)?,
            headers: serde_json::json!(trace.headers()),
        })
    }
}

/// Outbox rows as columns, one array each, the way `unnest` takes them: for [`enqueue_all`],
/// and for a statement that writes the rows together with the change they announce.
#[derive(Debug, Default)]
pub struct OutboxColumns<'a> {
    pub event_ids: Vec<uuid::Uuid>,
    pub exchanges: Vec<&'a str>,
    pub routing_keys: Vec<&'a str>,
    pub payloads: Vec<&'a serde_json::Value>,
    pub headers: Vec<&'a serde_json::Value>,
}

impl<'a> OutboxColumns<'a> {
    pub fn of(rows: &'a [NewOutboxRow]) -> Self {
        let mut columns = Self::default();
        for row in rows {
            columns.event_ids.push(row.event_id);
            columns.exchanges.push(row.exchange.as_str());
            columns.routing_keys.push(row.routing_key);
            columns.payloads.push(&row.payload);
            columns.headers.push(&row.headers);
        }
        columns
    }
}

/// Writes every row to the outbox in one statement (inside the caller's transaction); after
/// the commit, the caller hands the same rows to [`OutboxSignal::committed`].
pub async fn enqueue_all(conn: Conn<'_>, rows: &[NewOutboxRow]) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows: Vec<_> = rows.iter().map(NewOutboxRow::as_mysql).collect();
            return platform_mysql::outbox::insert(conn, &rows).await;
        }
    };
    let c = OutboxColumns::of(rows);
    // unnest keeps the rows in order, so the relay publishes them in the batch's order.
    sqlx::query!(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[])",
        &c.event_ids,
        &c.exchanges as &[&str],
        &c.routing_keys as &[&str],
        &c.payloads as &[&serde_json::Value],
        &c.headers as &[&serde_json::Value],
    )
    .execute(conn)
    .await
    .map(drop)
}
