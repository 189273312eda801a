//! The consumer loop shared by both services: deliveries are handled in batches.
//!
//! - Subscribes to its queue with `concurrency` channels, each with its own prefetch window
//!   and its own loop: a loop takes the deliveries already buffered (at least one, at most
//!   the prefetch; while busy it first waits a moment for more, see
//!   [`crate::messaging::linger`]), hands them to the handler as one batch, and settles each
//!   by its own outcome ([`settle`]).
//! - Each channel is kept subscribed on its own ([`resubscribe`]): one the broker closes (or
//!   whose consumer it cancels) is replaced within a backoff of 100 ms to 5 s while the others
//!   run; after a lost connection every channel comes back on the next one.
//! - Acks only after the handler's transaction committed (the handler returns after commit),
//!   contiguous successes with one `basic_ack(multiple)`.
//! - A message the handler cannot parse is rejected without requeue: the queue dead-letters
//!   it at once. A handler failure is counted against the message's id in the database and
//!   nacked with requeue after a pause; the [`FAILURE_LIMIT`]th is rejected instead
//!   ([`failures`]: the broker's delivery count also grows with every crash of a consumer
//!   holding the message, so it is only a backstop). While PostgreSQL itself is unreachable
//!   the loop waits for it before nacking, so an outage does not spend anything.
//! - Contention (a busy lock, a lost race) is not failure: the message is kept unacked in
//!   this process and handled again with the next batch. A nack would count as a delivery on
//!   a quorum queue and spend the delivery limit of a valid message. After [`KEPT_ROUNDS`]
//!   rounds it is sent back to the tail of its queue ([`send_back`]), so one busy product
//!   never fills the prefetch window.
//! - A batch that fails as a whole (an error other than contention, a panic, a wrong number
//!   of outcomes) is applied again one message at a time, so each message gets its own
//!   verdict: only a message that is itself poison is dead-lettered, only one that itself
//!   fails spends a delivery ([`handle`]).
//! - On shutdown it cancels the subscription after the batch in hand, and closes the channel
//!   so unacked deliveries (kept ones too) return to the queue.

mod batch;
mod channel;
mod failures;
mod headers;
mod resubscribe;
mod send_back;
mod settle;

use std::future::Future;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::messaging::broker::Broker;
use crate::messaging::linger::Linger;
use crate::telemetry::TraceContext;

pub use batch::{Received, handle};
pub use failures::{ConsumerStore, FAILURE_LIMIT};
pub use send_back::{KEPT_ROUNDS, MESSAGES_SENT_BACK_TOTAL};

pub const MESSAGES_CONSUMED_TOTAL: &str = "messages_consumed_total";
/// Consumer channels subscribed again after theirs ended while the service ran.
pub const CONSUMER_CHANNELS_REPLACED_TOTAL: &str = "consumer_channels_replaced_total";

/// Every `result` label of [`MESSAGES_CONSUMED_TOTAL`].
const RESULTS: [&str; 5] = [
    "applied",
    "duplicate",
    "dead_lettered",
    "retried",
    "contended",
];

/// Describes the consumer's metrics and exposes them (every `result`) at zero.
pub fn register_metrics() {
    crate::telemetry::metrics::handle();
    metrics::describe_counter!(
        MESSAGES_CONSUMED_TOTAL,
        "Deliveries handled, by result: applied, duplicate, dead_lettered, retried, \
         contended (kept in process and tried again with the next batch)"
    );
    crate::telemetry::metrics::zero_counter(MESSAGES_CONSUMED_TOTAL, "result", &RESULTS);
    metrics::describe_counter!(
        CONSUMER_CHANNELS_REPLACED_TOTAL,
        "Consumer channels subscribed again after theirs ended (closed by the broker, consumer \
         cancelled, connection lost) while the service ran"
    );
    crate::telemetry::metrics::zero_counter(CONSUMER_CHANNELS_REPLACED_TOTAL, "", &[]);
    metrics::describe_counter!(
        MESSAGES_SENT_BACK_TOTAL,
        "Messages kept for contention through their whole round budget, then published again \
         to the tail of their queue (same message id) and acked"
    );
    crate::telemetry::metrics::zero_counter(MESSAGES_SENT_BACK_TOTAL, "", &[]);
}

/// One delivery, as handlers see it.
#[derive(Debug, Clone)]
pub struct Message {
    pub routing_key: String,
    pub body: Vec<u8>,
    /// Continues the publisher's trace (from the `traceparent` header).
    pub trace: TraceContext,
    /// How many times the broker delivered this message before (quorum queues count).
    pub previous_deliveries: i64,
}

/// What a handler did with a message it understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    Applied,
    /// Its id was already recorded: nothing changed.
    Duplicate,
}

/// Why a message was not handled this time; the consumer's own error type (the HTTP edge
/// has its own).
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The message can never be handled (unparseable, unknown type): dead-letter it now.
    #[error("poison message: {0}")]
    Poison(String),
    /// Handling failed this time (database error): requeue it; this spends one of its
    /// deliveries.
    #[error(transparent)]
    Retry(#[from] anyhow::Error),
    /// Someone else holds what it needs (a busy lock, a version that moved): keep it and try
    /// again with the next batch, without spending a delivery.
    #[error("contention: {0}")]
    Contention(String),
}

impl From<sqlx::Error> for ConsumeError {
    fn from(error: sqlx::Error) -> Self {
        if is_database_contention(&error) {
            Self::Contention(error.to_string())
        } else {
            Self::Retry(error.into())
        }
    }
}

impl ConsumeError {
    /// A failure PostgreSQL reports when another transaction was in the way is contention,
    /// wherever in the error chain it sits: it must not spend a delivery.
    pub(crate) fn normalized(self) -> Self {
        match self {
            Self::Retry(error)
                if error
                    .chain()
                    .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
                    .any(is_database_contention) =>
            {
                Self::Contention(format!("{error:#}"))
            }
            other => other,
        }
    }
}

/// A deadlock, a serialization failure or a lock not available: the database undid this
/// transaction because of another one, and running it again is the remedy
/// ([`crate::storage::is_contention`]).
pub fn is_database_contention(error: &sqlx::Error) -> bool {
    crate::storage::is_contention(error)
}

/// One message's outcome.
pub type Outcome = Result<Handled, ConsumeError>;

/// The `result` label of [`MESSAGES_CONSUMED_TOTAL`] that `outcome` counts under.
pub fn result_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Ok(Handled::Applied) => "applied",
        Ok(Handled::Duplicate) => "duplicate",
        Err(ConsumeError::Poison(_)) => "dead_lettered",
        Err(ConsumeError::Retry(_)) => "retried",
        Err(ConsumeError::Contention(_)) => "contended",
    }
}

/// What a service gives the consumer loop: how to read a delivery, and how to apply a batch
/// of them. The rest (batching, the one-by-one fallback, panics, settling) is the loop's, and
/// the same for every queue.
pub trait Handler: Clone + Send + Sync + 'static {
    /// A delivery the handler understood.
    type Work: Send + Sync;

    /// Reads one delivery. An error is that message's own verdict (a message that can never
    /// be handled is [`ConsumeError::Poison`]).
    fn parse(&self, message: &Message) -> Result<Self::Work, ConsumeError>;

    /// Applies `works`, in arrival order, in one transaction that records their message ids
    /// and commits before returning. On success, one outcome per work in the same order, each
    /// the one applying them one at a time in that order would give; an error fails the batch
    /// as a whole, and the loop then decides each message alone ([`handle`]).
    fn apply_batch(
        &self,
        works: &[Self::Work],
    ) -> impl Future<Output = Result<Vec<Outcome>, ConsumeError>> + Send;
}

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub queue: &'static str,
    pub consumer_tag: String,
    /// Deliveries the broker sends ahead of acks, per channel; also the largest batch.
    pub prefetch: u16,
    /// Channels consuming at once, each handling one batch at a time.
    pub concurrency: usize,
    /// How long a busy channel waits for its batch to fill.
    pub linger: Linger,
}

/// Consumes `settings.queue` until `shutdown` with `settings.concurrency` channels, each
/// replaced on its own whenever its subscription ends ([`resubscribe`]), on a new connection
/// once the broker is back.
pub async fn run<H: Handler, S: ConsumerStore>(
    broker: Broker,
    db: S,
    settings: ConsumerSettings,
    handler: H,
    shutdown: CancellationToken,
) {
    let channels = (0..settings.concurrency.max(1)).map(|n| {
        resubscribe::keep_subscribed(&broker, n, &settings, &handler, &db, &shutdown).boxed()
    });
    futures_util::future::join_all(channels).await;
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::*;

    /// A real error of PostgreSQL's with `code`, raised by the server.
    async fn database_error(code: &str) -> sqlx::Error {
        let server =
            crate::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432");
        let mut conn = sqlx::PgConnection::connect(&format!("{server}/postgres"))
            .await
            .expect("PostgreSQL");
        let raise =
            format!("DO $$ BEGIN RAISE EXCEPTION 'in the way' USING ERRCODE = '{code}'; END $$");
        sqlx::query(sqlx::AssertSqlSafe(raise))
            .execute(&mut conn)
            .await
            .expect_err("the statement raises")
    }

    #[tokio::test]
    async fn a_deadlock_or_serialization_failure_is_contention_not_a_spent_delivery() {
        for code in ["40P01", "40001", "55P03"] {
            let error = database_error(code).await;
            assert!(matches!(
                ConsumeError::from(database_error(code).await),
                ConsumeError::Contention(_)
            ));
            let wrapped =
                ConsumeError::Retry(anyhow::Error::from(error).context("applying a batch"));
            assert!(
                matches!(wrapped.normalized(), ConsumeError::Contention(_)),
                "{code}"
            );
        }
        let other = ConsumeError::from(database_error("23514").await);
        assert!(matches!(other.normalized(), ConsumeError::Retry(_)));
    }
}
