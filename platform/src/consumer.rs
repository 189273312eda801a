//! The consumer loop shared by both services.
//!
//! - Subscribes to its queue on every (re)connection, with a prefetch window, and handles
//!   up to `concurrency` deliveries at once.
//! - Acks only after the handler's transaction committed (the handler returns after commit).
//! - A message the handler cannot parse is rejected without requeue: the queue dead-letters
//!   it at once. A handler failure is nacked with requeue after a pause; the queue's
//!   delivery limit dead-letters a message that keeps failing. While PostgreSQL itself is
//!   unreachable the loop waits for it before nacking, so an outage does not burn through
//!   the delivery limit of healthy messages.
//! - On shutdown it cancels the subscription, lets in-flight handlers finish, and closes
//!   the channel so unacked deliveries return to the queue.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::amqp::Broker;
use crate::http::TraceContext;
use crate::http::trace::TRACEPARENT;
use crate::retry::backoff;

pub const MESSAGES_CONSUMED_TOTAL: &str = "messages_consumed_total";

/// Describes the consumer's metric and exposes every `result` at zero.
pub fn register_metrics() {
    crate::http::metrics::handle();
    metrics::describe_counter!(
        MESSAGES_CONSUMED_TOTAL,
        "Deliveries handled, by result: applied, duplicate, dead_lettered, retried"
    );
    crate::http::metrics::zero_counter(
        MESSAGES_CONSUMED_TOTAL,
        "result",
        &["applied", "duplicate", "dead_lettered", "retried"],
    );
}

/// One delivery, as handlers see it.
#[derive(Debug)]
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

#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// The message can never be handled (unparseable, unknown type): dead-letter it now.
    #[error("poison message: {0}")]
    Poison(String),
    /// Handling failed this time (database error, lost lock): retry it.
    #[error(transparent)]
    Retry(#[from] anyhow::Error),
}

impl From<sqlx::Error> for HandleError {
    fn from(error: sqlx::Error) -> Self {
        Self::Retry(error.into())
    }
}

/// A message handler; it must record the message id and commit before returning `Ok`.
pub trait Handler: Clone + Send + Sync + 'static {
    fn handle(&self, message: Message)
    -> impl Future<Output = Result<Handled, HandleError>> + Send;
}

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub queue: &'static str,
    pub consumer_tag: String,
    /// Deliveries the broker sends ahead of acks.
    pub prefetch: u16,
    /// Deliveries handled at once.
    pub concurrency: usize,
}

/// Consumes `settings.queue` until `shutdown`, reconnecting whenever the broker comes back.
pub async fn run<H: Handler>(
    broker: Broker,
    db: PgPool,
    settings: ConsumerSettings,
    handler: H,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        let Some(conn) = broker.connection(&shutdown).await else {
            break;
        };
        let subscription = async {
            let channel = conn.create_channel().await?;
            channel
                .basic_qos(settings.prefetch, BasicQosOptions::default())
                .await?;
            let consumer = channel
                .basic_consume(
                    settings.queue.into(),
                    settings.consumer_tag.as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            Ok::<_, lapin::Error>((channel, consumer))
        };
        let (channel, consumer) = match subscription.await {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, queue = settings.queue, "cannot subscribe; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        tracing::info!(queue = settings.queue, "consuming");
        let stop = shutdown.clone();
        consumer
            .take_until(async move { stop.cancelled().await })
            .for_each_concurrent(settings.concurrency, |delivery| {
                let handler = handler.clone();
                let db = db.clone();
                let shutdown = shutdown.clone();
                async move {
                    match delivery {
                        Ok(delivery) => process(delivery, &handler, &db, &shutdown).await,
                        Err(error) => tracing::warn!(%error, "consumer stream error"),
                    }
                }
            })
            .await;
        if shutdown.is_cancelled() {
            channel
                .basic_cancel(
                    settings.consumer_tag.as_str().into(),
                    BasicCancelOptions::default(),
                )
                .await
                .ok();
            channel.close(200, "shutting down".into()).await.ok();
            break;
        }
        tracing::warn!(queue = settings.queue, "subscription ended; resubscribing");
    }
}

async fn process<H: Handler>(
    delivery: Delivery,
    handler: &H,
    db: &PgPool,
    shutdown: &CancellationToken,
) {
    let headers = delivery.properties.headers().clone().unwrap_or_default();
    let trace = TraceContext::from_header(header_str(&headers, TRACEPARENT).as_deref());
    let previous_deliveries = header_i64(&headers, "x-delivery-count").unwrap_or(0);
    let span = tracing::info_span!(
        "message",
        routing_key = %delivery.routing_key,
        message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str()).unwrap_or_default(),
        trace_id = %trace.trace_id,
    );
    let message = Message {
        routing_key: delivery.routing_key.to_string(),
        body: delivery.data.clone(),
        trace,
        previous_deliveries,
    };
    // The whole handling runs in the message's span through `instrument`: a span entered with
    // `enter()` and held across an `.await` would stay current on whichever thread polled it
    // last, and other tasks there would pick it up (or find it closed, and panic).
    async move {
        // A handler that panics fails this delivery only (it is retried, then dead-lettered
        // at the delivery limit), not the subscription and the other deliveries in flight.
        let result = AssertUnwindSafe(handler.handle(message))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(HandleError::Retry(anyhow::anyhow!("the handler panicked"))));
        settle(delivery, result, previous_deliveries, db, shutdown).await;
    }
    .instrument(span)
    .await;
}

/// Acks, rejects or (after a pause) requeues the delivery, as the handler's result says.
async fn settle(
    delivery: Delivery,
    result: Result<Handled, HandleError>,
    previous_deliveries: i64,
    db: &PgPool,
    shutdown: &CancellationToken,
) {
    let acked = match result {
        Ok(handled) => {
            let label = if handled == Handled::Applied {
                "applied"
            } else {
                "duplicate"
            };
            metrics::counter!(MESSAGES_CONSUMED_TOTAL, "result" => label).increment(1);
            delivery.ack(BasicAckOptions::default()).await
        }
        Err(HandleError::Poison(reason)) => {
            tracing::error!(reason, "dead-lettering a message that cannot be handled");
            metrics::counter!(MESSAGES_CONSUMED_TOTAL, "result" => "dead_lettered").increment(1);
            delivery.reject(BasicRejectOptions { requeue: false }).await
        }
        Err(HandleError::Retry(error)) => {
            tracing::warn!(
                error = format!("{error:#}"),
                previous_deliveries,
                "handling failed; will retry"
            );
            metrics::counter!(MESSAGES_CONSUMED_TOTAL, "result" => "retried").increment(1);
            wait_before_retry(db, previous_deliveries, shutdown).await;
            delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                })
                .await
        }
    };
    if let Err(error) = acked {
        // The channel is gone; the broker redelivers the message, and the id makes it a no-op.
        tracing::warn!(%error, "could not settle a delivery");
    }
}

/// Pauses before a retry: with backoff per delivery, and for as long as PostgreSQL is down.
async fn wait_before_retry(db: &PgPool, previous_deliveries: i64, shutdown: &CancellationToken) {
    let pause = backoff(
        u32::try_from(previous_deliveries).unwrap_or(u32::MAX),
        Duration::from_millis(100),
        Duration::from_secs(5),
    );
    tokio::select! {
        () = shutdown.cancelled() => return,
        () = tokio::time::sleep(pause) => {}
    }
    let mut attempt = 0;
    while !shutdown.is_cancelled() && sqlx::query("SELECT 1").execute(db).await.is_err() {
        attempt += 1;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff(attempt, Duration::from_millis(200), Duration::from_secs(5))) => {}
        }
    }
}

fn header_str(headers: &FieldTable, key: &str) -> Option<String> {
    match headers.inner().get(key)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

fn header_i64(headers: &FieldTable, key: &str) -> Option<i64> {
    match headers.inner().get(key)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}
