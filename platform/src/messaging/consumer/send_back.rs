//! Sending back messages kept too long for contention (docs/contract.md §4.4).
//!
//! A kept message stays unacked in this process and fills a slot of the channel's prefetch
//! window. A product whose lock stays busy (a paused holder, a stream of direct deductions)
//! could fill the whole window with its messages, and the channel would then receive nothing
//! else: no other product's orders, no cancellation. So a kept message has a budget of
//! [`KEPT_ROUNDS`] rounds; after it, the message goes back to the tail of its queue as a
//! fresh delivery and the window slot is freed.
//!
//! "Back" is a new publish of the same message (same body, message id and headers) to the
//! queue itself by the default exchange, confirmed by the broker, and only then an ack of the
//! delivery. Not a `nack(requeue)`: a quorum queue counts every return against the delivery
//! limit, and a message kept behind a busy lock would be dead-lettered for nothing. A crash
//! between the confirm and the ack leaves two copies with one id; the consumer records ids,
//! so the second changes nothing.

use lapin::options::{BasicAckOptions, BasicPublishOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use super::batch::{ROUTING_KEY_HEADER, Received};
use crate::messaging::confirms;

/// Rounds a message is kept for contention before it is sent back to its queue. Kept
/// messages are tried with every batch, and when nothing else arrives after a pause that
/// doubles from 2 ms to 100 ms: 16 rounds last about a second on an idle channel, less on a
/// busy one.
pub const KEPT_ROUNDS: u32 = 16;

/// Messages sent back to their queue after their round budget.
pub const MESSAGES_SENT_BACK_TOTAL: &str = "consumer_messages_sent_back_total";

/// How long the broker may take to confirm what is sent back.
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends `due` back to `queue` on `channel` (a confirm channel) and acks each one the broker
/// confirmed; returns the rest, still unacked and kept, to be tried again.
pub(super) async fn send_back(channel: &Channel, queue: &str, due: Vec<Received>) -> Vec<Received> {
    let mut publishes = Vec::with_capacity(due.len());
    for received in &due {
        let publish = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &received.delivery.data,
                fresh_properties(received),
            )
            .await;
        publishes.push(publish);
    }
    let mut kept = Vec::new();
    for (received, confirmed) in due
        .into_iter()
        .zip(confirms::collect(publishes, CONFIRM_TIMEOUT).await)
    {
        match confirmed.outcome {
            Ok(()) => {
                metrics::counter!(MESSAGES_SENT_BACK_TOTAL).increment(1);
                let acked = received.delivery.ack(BasicAckOptions::default()).await;
                if let Err(error) = acked {
                    // The copy is in the queue; the original comes back too, and its id makes
                    // one of them a duplicate.
                    tracing::warn!(%error, "could not ack a message sent back");
                }
            }
            Err(error) => {
                received.span.in_scope(|| {
                    tracing::warn!(error, "could not send a kept message back; keeping it");
                });
                kept.push(received);
            }
        }
    }
    kept
}

/// The delivery's properties for its copy: the same message id, type and headers, with the
/// routing key it was first published with (the copy goes by the queue's name), and without
/// the broker's count of deliveries (the copy is a new message).
fn fresh_properties(received: &Received) -> BasicProperties {
    let mut headers = FieldTable::default();
    if let Some(first) = received.delivery.properties.headers() {
        for (key, value) in first.inner() {
            if key.as_str() != "x-delivery-count" {
                headers.insert(key.clone(), value.clone());
            }
        }
    }
    if !headers.contains_key(ROUTING_KEY_HEADER) {
        headers.insert(
            ROUTING_KEY_HEADER.into(),
            AMQPValue::LongString(received.message.routing_key.as_str().into()),
        );
    }
    received.delivery.properties.clone().with_headers(headers)
}
