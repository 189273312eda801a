//! A batch of deliveries in hand, and handing it to the handler with panics contained.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use lapin::message::Delivery;
use lapin::types::AMQPValue;
use tracing::{Instrument, Span};

use super::headers::{AmqpHeaders, header_i64};
use super::{ConsumeError, Handler, Message, Outcome};
use crate::telemetry::TraceContext;

/// The header a message sent back to its queue carries its first routing key in.
pub(super) const ROUTING_KEY_HEADER: &str = "x-first-routing-key";

/// A delivery, the message handlers see, and the span its logs go to.
#[derive(Debug)]
pub struct Received {
    pub(super) delivery: Delivery,
    pub(super) message: Message,
    pub(super) span: Span,
    /// The id the publisher gave it (the event id), by which its failures are counted.
    pub(super) message_id: Option<uuid::Uuid>,
    /// Rounds it has been kept in process for contention so far ([`super::send_back`]).
    pub(super) rounds: u32,
}

impl Received {
    pub(super) fn new(delivery: Delivery) -> Self {
        let headers = delivery.properties.headers().clone().unwrap_or_default();
        let previous_deliveries = header_i64(&headers, "x-delivery-count").unwrap_or(0);
        // A message this consumer sent back to its queue went by the default exchange, under
        // the queue's name: its header keeps the key it was first published with.
        let routing_key = match headers.inner().get(ROUTING_KEY_HEADER) {
            Some(AMQPValue::LongString(key)) => {
                String::from_utf8_lossy(key.as_bytes()).into_owned()
            }
            _ => delivery.routing_key.to_string(),
        };
        let message_id = delivery
            .properties
            .message_id()
            .as_ref()
            .and_then(|id| id.as_str().parse().ok());
        // A consumer span (OpenTelemetry's messaging conventions), open until the delivery
        // is settled, child of the span that published it.
        let span = tracing::info_span!(
            "message",
            otel.name = %format_args!("{routing_key} process"),
            otel.kind = "consumer",
            messaging.system = "rabbitmq",
            "messaging.operation.type" = "process",
            routing_key = %routing_key,
            message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str()).unwrap_or_default(),
            trace_id = tracing::field::Empty,
        );
        let trace = TraceContext::extract(&AmqpHeaders(&headers)).parent_of(&span);
        span.record("trace_id", trace.trace_id().as_str());
        let message = Message {
            routing_key,
            body: delivery.data.clone(),
            trace,
            previous_deliveries,
        };
        Self {
            delivery,
            message,
            span,
            message_id,
            rounds: 0,
        }
    }
}

/// One outcome per delivery of `batch`, in its order, each handled in its own span.
pub(super) async fn handle_received<H: Handler>(handler: &H, batch: &[Received]) -> Vec<Outcome> {
    let messages: Vec<&Message> = batch.iter().map(|r| &r.message).collect();
    let spans: Vec<Span> = batch.iter().map(|r| r.span.clone()).collect();
    decide(handler, &messages, &spans).await
}

/// One outcome per message of `messages`, in its order: the consumer's one policy.
///
/// Each message is parsed; what parses is applied as one batch. A batch that fails as a
/// whole for any reason but contention (an error, a panic, a wrong number of outcomes) is
/// applied again one message at a time, so each message gets its own verdict and a
/// batch-level error never dead-letters a message that was not itself judged poison.
/// Contention is the whole batch's: it is kept and tried again with the next batch.
pub async fn handle<H: Handler>(handler: &H, messages: &[Message]) -> Vec<Outcome> {
    let messages: Vec<&Message> = messages.iter().collect();
    let spans = vec![Span::current(); messages.len()];
    decide(handler, &messages, &spans).await
}

async fn decide<H: Handler>(handler: &H, messages: &[&Message], spans: &[Span]) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(messages.len());
    let mut works = Vec::new();
    let mut positions = Vec::new();
    for (position, message) in messages.iter().enumerate() {
        // A handler that panics reading a message fails that delivery alone, as in a batch.
        let parsed = spans[position].in_scope(|| {
            std::panic::catch_unwind(AssertUnwindSafe(|| handler.parse(message)))
                .unwrap_or_else(|_| Err(retry("the handler panicked reading the message")))
        });
        match parsed {
            Ok(work) => {
                works.push(work);
                positions.push(position);
                outcomes.push(None);
            }
            Err(verdict) => outcomes.push(Some(Err(verdict))),
        }
    }
    let span = tracing::info_span!("batch", size = works.len());
    let applied = match apply(handler, &works, span).await {
        Ok(each) => each,
        Err(ConsumeError::Contention(reason)) => works
            .iter()
            .map(|_| Err(ConsumeError::Contention(reason.clone())))
            .collect(),
        Err(error) if works.len() == 1 => vec![Err(error)],
        Err(error) => {
            tracing::warn!(
                error = format!("{error:#}"),
                size = works.len(),
                "the batch failed as a whole; applying its messages one by one"
            );
            let mut alone = Vec::with_capacity(works.len());
            for (work, position) in works.iter().zip(&positions) {
                let one = apply(
                    handler,
                    std::slice::from_ref(work),
                    spans[*position].clone(),
                );
                alone.push(match one.await {
                    Ok(mut one) => one.remove(0),
                    Err(error) => Err(error),
                });
            }
            alone
        }
    };
    for (position, outcome) in positions.into_iter().zip(applied) {
        outcomes[position] = Some(outcome);
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(retry("no outcome"))))
        .collect()
}

/// Applies `works` as one batch: exactly one outcome per work, or the batch's error (a panic
/// and a wrong number of outcomes are errors of the batch).
async fn apply<H: Handler>(
    handler: &H,
    works: &[H::Work],
    span: Span,
) -> Result<Vec<Outcome>, ConsumeError> {
    if works.is_empty() {
        return Ok(Vec::new());
    }
    // The handling runs in the span through `instrument`: a span entered with `enter()` and
    // held across an `.await` would stay current on whichever thread polled it last.
    let applied = AssertUnwindSafe(handler.apply_batch(works))
        .catch_unwind()
        .instrument(span)
        .await;
    match applied {
        Ok(Ok(outcomes)) if outcomes.len() == works.len() => Ok(outcomes),
        Ok(Ok(outcomes)) => {
            tracing::error!(
                got = outcomes.len(),
                expected = works.len(),
                "the handler returned a wrong number of outcomes"
            );
            Err(retry("the handler returned a wrong number of outcomes"))
        }
        Ok(Err(error)) => Err(error.normalized()),
        Err(_) => Err(retry("the handler panicked")),
    }
}

fn retry(reason: &'static str) -> ConsumeError {
    ConsumeError::Retry(anyhow::anyhow!(reason))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::messaging::consumer::{Handled, result_label};

    /// Fails a batch as a whole the way a real handler's transaction does: one bad message
    /// takes every message of its batch down with it.
    #[derive(Clone, Default)]
    struct Strict {
        batches: Arc<Mutex<Vec<Vec<String>>>>,
    }

    impl Handler for Strict {
        type Work = String;

        fn parse(&self, message: &Message) -> Result<String, ConsumeError> {
            let body = String::from_utf8(message.body.clone()).expect("text");
            match body.as_str() {
                "unreadable" => Err(ConsumeError::Poison("unreadable".into())),
                "unparsable" => panic!("a parser bug"),
                _ => Ok(body),
            }
        }

        async fn apply_batch(&self, works: &[String]) -> Result<Vec<Outcome>, ConsumeError> {
            self.batches.lock().expect("batches").push(works.to_vec());
            let has = |body: &str| works.iter().any(|w| w == body);
            if has("busy") {
                return Err(ConsumeError::Contention("busy".into()));
            }
            if has("panics") {
                panic!("a handler bug");
            }
            if has("poison") {
                // Judged poison, but for the batch: only a batch of one says which message.
                return Err(ConsumeError::Poison("a poison message in the batch".into()));
            }
            if has("fails") {
                return Err(ConsumeError::Retry(anyhow::anyhow!(
                    "the transaction failed"
                )));
            }
            Ok(works.iter().map(|_| Ok(Handled::Applied)).collect())
        }
    }

    fn messages(bodies: &[&str]) -> Vec<Message> {
        bodies
            .iter()
            .map(|body| Message {
                routing_key: "test".into(),
                body: body.as_bytes().to_vec(),
                trace: TraceContext::new_root(),
                previous_deliveries: 0,
            })
            .collect()
    }

    fn labels(outcomes: &[Outcome]) -> Vec<&'static str> {
        outcomes.iter().map(result_label).collect()
    }

    #[tokio::test]
    async fn a_batch_level_poison_error_dead_letters_only_the_message_judged_poison_alone() {
        let handler = Strict::default();
        let outcomes = handle(&handler, &messages(&["a", "poison", "b"])).await;
        assert_eq!(labels(&outcomes), ["applied", "dead_lettered", "applied"]);
        assert_eq!(handler.batches.lock().expect("batches").len(), 4);
    }

    #[tokio::test]
    async fn a_failed_or_panicking_batch_is_applied_again_one_message_at_a_time() {
        for bad in ["fails", "panics"] {
            let handler = Strict::default();
            let outcomes = handle(&handler, &messages(&["a", bad, "b"])).await;
            assert_eq!(
                labels(&outcomes),
                ["applied", "retried", "applied"],
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn contention_keeps_the_whole_batch_without_trying_each_message() {
        let handler = Strict::default();
        let outcomes = handle(&handler, &messages(&["a", "busy", "b"])).await;
        assert_eq!(labels(&outcomes), ["contended"; 3]);
        assert_eq!(handler.batches.lock().expect("batches").len(), 1);
    }

    #[tokio::test]
    async fn a_message_that_cannot_be_read_fails_alone_and_the_rest_go_as_one_batch() {
        for (bad, label) in [("unreadable", "dead_lettered"), ("unparsable", "retried")] {
            let handler = Strict::default();
            let outcomes = handle(&handler, &messages(&["a", bad, "b"])).await;
            assert_eq!(labels(&outcomes), ["applied", label, "applied"], "{bad}");
            assert_eq!(
                *handler.batches.lock().expect("batches"),
                [vec!["a".to_owned(), "b".to_owned()]]
            );
        }
    }
}
