//! A JSON document read as a whole (`serde_json::Value`), for handlers that look at the body
//! before they type it (order-service fingerprints it, and fills in the caller's `user_id`).
//!
//! `Value` keeps the last of two equal keys in one object, silently. A body read straight into
//! a typed struct refuses a repeated field instead, so the same body would be accepted by one
//! endpoint and refused by another; and a repeated key is where two parsers (a gateway's and
//! ours) may disagree about what a request says. A document read here refuses it too, 422.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

/// The most of a repeated key a refusal quotes: a key may be as long as the body.
const QUOTED_CHARS: usize = 64;

/// A document in which no object gives a key twice. Numbers arrive as `i64`, `u64` or `f64`,
/// as they do for `Value`, while serde_json is built without `arbitrary_precision` (which
/// would hand them over as maps); the first test below would catch that change.
pub(super) struct Document(pub Value);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocumentVisitor).map(Document)
    }
}

struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Document(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Document(value) = map.next_value()?;
            match object.entry(key) {
                Entry::Occupied(taken) => {
                    return Err(de::Error::custom(format_args!(
                        "the key {:?} is given twice in one object",
                        shortened(taken.key())
                    )));
                }
                Entry::Vacant(free) => {
                    free.insert(value);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

fn shortened(key: &str) -> String {
    match key.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{}…", &key[..end]),
        None => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(raw: &str) -> Result<Value, serde_json::Error> {
        serde_json::from_str::<Document>(raw).map(|d| d.0)
    }

    #[test]
    fn a_document_reads_as_value_does() {
        for raw in [
            r#"{"a": [1, -2, 2.5, "x", true, null, {"b": {}}], "c": 18446744073709551615}"#,
            "[]",
            "\"text\"",
            "0",
        ] {
            let expected: Value = serde_json::from_str(raw).expect("JSON");
            assert_eq!(read(raw).expect(raw), expected, "{raw}");
        }
    }

    #[test]
    fn a_key_given_twice_in_one_object_is_refused_at_any_depth() {
        for raw in [
            r#"{"user_id": 1, "user_id": 2}"#,
            r#"{"items": [{"product_id": 1, "quantity": 1, "quantity": 2}]}"#,
        ] {
            let error = read(raw).expect_err(raw);
            assert!(error.is_data(), "{raw}: {error}");
            assert!(error.to_string().contains("given twice"), "{error}");
        }
        assert!(
            read(r#"{"a": {"k": 1}, "b": {"k": 1}}"#).is_ok(),
            "one key per object"
        );
        let long = "k".repeat(10_000);
        let error = read(&format!(r#"{{"{long}": 1, "{long}": 2}}"#)).expect_err("twice");
        assert!(error.to_string().len() < 200, "quoted whole: {error}");
    }
}
