//! Reading a delivery's AMQP headers: as a W3C trace-context carrier, and as integers.

use lapin::types::{AMQPValue, FieldTable};

/// AMQP headers as a carrier for the W3C propagator (the publisher writes long strings).
pub(super) struct AmqpHeaders<'a>(pub(super) &'a FieldTable);

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

pub(super) fn header_i64(headers: &FieldTable, key: &str) -> Option<i64> {
    match headers.inner().get(key)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}
