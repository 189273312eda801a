//! Publishing a batch of rows, whoever holds them: the producer span and headers that carry
//! each row's trace, the message's properties, one round of confirms for the batch, and what
//! a failed publish waits before the next try.

use std::collections::HashMap;

use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use super::{OUTBOX_PUBLISH_FAILURES_TOTAL, OutboxRow, RelaySettings};
use crate::messaging::confirms;
use crate::retry::backoff;
use crate::telemetry::TraceContext;

/// A producer span for `row` (OpenTelemetry's messaging conventions), child of the span that
/// wrote it (the trace context stored with the row), open until the broker confirms; and
/// the row's headers with that span's context in place of the writer's, for the consumer.
fn publish_span(row: &OutboxRow) -> (tracing::Span, FieldTable) {
    let stored: HashMap<String, String> = row
        .headers
        .as_object()
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let span = tracing::info_span!(
        "publish",
        otel.name = %format_args!("{} publish", row.routing_key),
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "rabbitmq",
        "messaging.operation.type" = "send",
        messaging.destination.name = %row.exchange,
        routing_key = %row.routing_key,
        message_id = %row.event_id,
    );
    let trace = TraceContext::extract(&stored).parent_of(&span);
    let mut headers = FieldTable::default();
    for (key, value) in stored.into_iter().chain(trace.headers()) {
        headers.insert(key.as_str().into(), AMQPValue::LongString(value.into()));
    }
    (span, headers)
}

fn properties(row: &OutboxRow, headers: FieldTable) -> BasicProperties {
    BasicProperties::default()
        .with_message_id(row.event_id.to_string().into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_type(row.routing_key.as_str().into())
        .with_timestamp(
            chrono::Utc::now()
                .timestamp()
                .try_into()
                .unwrap_or_default(),
        )
        .with_headers(headers)
}

/// How long a row waits after its `attempts`-th failed publish.
pub(super) fn backoff_of(attempts: i32, settings: &RelaySettings) -> std::time::Duration {
    backoff(
        attempts.unsigned_abs(),
        settings.base_backoff,
        settings.max_backoff,
    )
}

/// What the broker said of each row of a batch.
pub(super) struct Published {
    pub(super) outcomes: Vec<Result<(), String>>,
    pub(super) channel_broken: bool,
}

/// Sends the whole batch, then collects the confirms: one round trip for many messages. A
/// failed publish is counted (and its span marked) here; recording it is the caller's.
pub(super) async fn publish_all(
    channel: &Channel,
    rows: &[OutboxRow],
    settings: &RelaySettings,
) -> Published {
    let mut pending = Vec::with_capacity(rows.len());
    let mut spans = Vec::with_capacity(rows.len());
    for row in rows {
        // A JSON value's text is its serialisation, which cannot fail.
        let body = row.payload.to_string().into_bytes();
        let (span, headers) = publish_span(row);
        spans.push(span);
        let publish = channel
            .basic_publish(
                row.exchange.as_str().into(),
                row.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                properties(row, headers),
            )
            .await;
        pending.push(publish);
    }
    let mut channel_broken = false;
    let mut outcomes = Vec::with_capacity(rows.len());
    for (confirmed, span) in confirms::collect(pending, settings.confirm_timeout)
        .await
        .into_iter()
        .zip(&spans)
    {
        channel_broken |= confirmed.channel_broken;
        if confirmed.outcome.is_err() {
            span.record("otel.status_code", "ERROR");
            metrics::counter!(OUTBOX_PUBLISH_FAILURES_TOTAL).increment(1);
        }
        outcomes.push(confirmed.outcome);
    }
    Published {
        outcomes,
        channel_broken,
    }
}
