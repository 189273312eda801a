//! A batch of deliveries in hand, and handing it to the handler with panics contained.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable};
use tracing::{Instrument, Span};

use super::{ConsumeError, Handler, Message, Outcome};
use crate::http::TraceContext;

/// A delivery, the message handlers see, and the span its logs go to.
#[derive(Debug)]
pub struct Received {
    pub(super) delivery: Delivery,
    pub(super) message: Message,
    pub(super) span: Span,
}

impl Received {
    pub(super) fn new(delivery: Delivery) -> Self {
        let headers = delivery.properties.headers().clone().unwrap_or_default();
        let previous_deliveries = header_i64(&headers, "x-delivery-count").unwrap_or(0);
        // A consumer span (OpenTelemetry's messaging conventions), open until the delivery
        // is settled, child of the span that published it.
        let span = tracing::info_span!(
            "message",
            otel.name = %format_args!("{} process", delivery.routing_key),
            otel.kind = "consumer",
            messaging.system = "rabbitmq",
            "messaging.operation.type" = "process",
            routing_key = %delivery.routing_key,
            message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str()).unwrap_or_default(),
            trace_id = tracing::field::Empty,
        );
        let trace = TraceContext::extract(&AmqpHeaders(&headers)).parent_of(&span);
        span.record("trace_id", trace.trace_id().as_str());
        let message = Message {
            routing_key: delivery.routing_key.to_string(),
            body: delivery.data.clone(),
            trace,
            previous_deliveries,
        };
        Self {
            delivery,
            message,
            span,
        }
    }
}

/// One outcome per delivery of `batch`, in its order.
///
/// A handler that panics on a batch of several gets each of its messages again alone, so the
/// message that makes it panic fails (is retried, then dead-lettered at the delivery limit)
/// and the others do not.
pub(super) async fn handle<H: Handler>(handler: &H, batch: &[Received]) -> Vec<Outcome> {
    let messages: Vec<Message> = batch.iter().map(|r| r.message.clone()).collect();
    let span = tracing::info_span!("batch", size = messages.len());
    // The handling runs in the span through `instrument`: a span entered with `enter()` and
    // held across an `.await` would stay current on whichever thread polled it last.
    let handled = AssertUnwindSafe(handler.handle_batch(&messages))
        .catch_unwind()
        .instrument(span)
        .await;
    match handled {
        Ok(outcomes) if outcomes.len() == messages.len() => outcomes,
        Ok(outcomes) => {
            tracing::error!(
                got = outcomes.len(),
                expected = messages.len(),
                "the handler returned a wrong number of outcomes; retrying the batch"
            );
            messages.iter().map(|_| Err(retry("no outcome"))).collect()
        }
        Err(_) if messages.len() == 1 => vec![Err(retry("the handler panicked"))],
        Err(_) => {
            tracing::warn!(
                size = messages.len(),
                "the handler panicked on a batch; handling its messages one by one"
            );
            let mut outcomes = Vec::with_capacity(messages.len());
            for (received, message) in batch.iter().zip(messages) {
                let alone = AssertUnwindSafe(handler.handle_batch(std::slice::from_ref(&message)))
                    .catch_unwind()
                    .instrument(received.span.clone())
                    .await;
                outcomes.push(match alone {
                    Ok(mut one) if one.len() == 1 => one.remove(0),
                    Ok(_) => Err(retry("no outcome")),
                    Err(_) => Err(retry("the handler panicked")),
                });
            }
            outcomes
        }
    }
}

fn retry(reason: &'static str) -> ConsumeError {
    ConsumeError::Retry(anyhow::anyhow!(reason))
}

/// AMQP headers as a carrier for the W3C propagator (the publisher writes long strings).
struct AmqpHeaders<'a>(&'a FieldTable);

impl opentelemetry::propagation::Extractor for AmqpHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match self.0.inner().get(key)? {
            AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
            AMQPValue::ShortString(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.0.inner().keys().map(|k| k.as_str()).collect()
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
