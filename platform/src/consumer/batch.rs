//! A batch of deliveries in hand, and handing it to the handler with panics contained.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable};
use tracing::{Instrument, Span};

use super::{ConsumeError, Handler, Message, Outcome};
use crate::http::TraceContext;
use crate::http::trace::TRACEPARENT;

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
