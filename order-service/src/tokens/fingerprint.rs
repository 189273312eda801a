//! The fingerprint of a request body: SHA-256 of its canonical JSON, so key order and
//! whitespace do not make two equal requests look different.

use serde_json::Value;
use sha2::{Digest, Sha256};

pub fn of_json(value: &Value) -> String {
    let mut canonical = Vec::with_capacity(256);
    write_canonical(value, &mut canonical);
    hex::encode(Sha256::digest(&canonical))
}

/// Objects with keys sorted, no insignificant whitespace. Sorting is done here rather than
/// relying on `serde_json`'s map order, which a dependency enabling `preserve_order` changes.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serialising a scalar cannot fail.
    out.extend_from_slice(&serde_json::to_vec(value).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(raw: &str) -> Value {
        serde_json::from_str(raw).unwrap_or_default()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = json(r#"{"a": 1, "b": [1, {"y": 2, "x": 1}]}"#);
        let b = json("{\"b\":[1,{\"x\":1,\"y\":2}],\n\"a\":1}");
        let c = json(r#"{"a": 2, "b": [1, {"y": 2, "x": 1}]}"#);
        assert_eq!(of_json(&a), of_json(&b));
        assert_ne!(of_json(&a), of_json(&c));
    }

    #[test]
    fn values_compare_as_they_are_written() {
        let same = |a: &str, b: &str| of_json(&json(a)) == of_json(&json(b));
        assert!(same(r#"{"amount": 200.0}"#, r#"{"amount":200.0}"#));
        assert!(!same(r#"{"amount": 200}"#, r#"{"amount": 200.0}"#));
        assert!(!same(r#"{"amount": 200.0}"#, r#"{"amount": "200.00"}"#));
    }
}
