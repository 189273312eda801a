//! The one rule every string a client sends must pass: no control characters.
//!
//! PostgreSQL refuses U+0000 in `text` (a 500 when it reaches it), and the other C0 controls
//! and DEL have no business in names, ids or keys (they hide in logs and break terminals).
//! docs/contract.md §3 makes them all a 422, wherever the string comes from: body, query or header.

/// Whether `c` is a control character the API refuses: U+0000–U+001F or U+007F.
pub fn is_refused(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}')
}

/// Whether `text` holds any refused control character.
pub fn has_control(text: &str) -> bool {
    text.chars().any(is_refused)
}

/// `Ok` when `text` holds no control character; otherwise the message a 422 carries, naming
/// `field` and where the first one is (never echoing the raw character).
pub fn check(field: &str, text: &str) -> Result<(), String> {
    match text.chars().position(is_refused) {
        None => Ok(()),
        Some(at) => Err(format!(
            "{field} must not contain control characters (U+0000-U+001F, U+007F); found one at character {at}"
        )),
    }
}

/// Checks every string of a JSON document, object keys included; the error names the path
/// of the first offending string (`$.items[0].name`, `$` for the root).
pub fn check_json(value: &serde_json::Value) -> Result<(), String> {
    fn walk(value: &serde_json::Value, path: &mut String) -> Result<(), String> {
        match value {
            serde_json::Value::String(s) => check(path, s),
            serde_json::Value::Array(items) => items.iter().enumerate().try_for_each(|(i, v)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let result = walk(v, path);
                path.truncate(len);
                result
            }),
            serde_json::Value::Object(fields) => fields.iter().try_for_each(|(k, v)| {
                let len = path.len();
                path.push('.');
                check(&format!("the key at {path}"), k)?;
                path.push_str(k);
                let result = walk(v, path);
                path.truncate(len);
                result
            }),
            _ => Ok(()),
        }
    }
    walk(value, &mut String::from("$"))
}

/// Whether a JSON text could hold a control character inside a string at all. Raw controls
/// below U+0020 are a syntax error in JSON strings, so only an escape (`\u0000`, `\t`, `\n`...)
/// or a raw DEL byte can smuggle one in; documents without a backslash or DEL, the common
/// case, skip the full walk.
pub fn json_may_hold_control(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b == b'\\' || b == 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c0_controls_and_del_are_refused_and_nothing_else() {
        for bad in ["a\u{0}b", "\t", "x\n", "\r", "\u{1f}", "del\u{7f}"] {
            assert!(check("name", bad).is_err(), "{bad:?}");
        }
        for good in [
            "",
            "Espresso cup",
            "é ü ß 漢字",
            "\u{80}",
            "\u{a0}",
            "tab-less",
        ] {
            assert!(check("name", good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn the_message_names_the_field_without_echoing_the_character() {
        let message = check("deduction_id", "ab\u{0}").expect_err("refused");
        assert!(message.contains("deduction_id"), "{message}");
        assert!(message.contains("character 2"), "{message}");
        assert!(!message.contains('\u{0}'));
    }

    #[test]
    fn every_string_and_key_of_a_document_is_checked() {
        let bad = [
            serde_json::json!({"name": "a\u{0}"}),
            serde_json::json!({"items": [{"note": "ok"}, {"note": "x\u{7f}"}]}),
            serde_json::json!({"ke\ny": 1}),
            serde_json::json!("\u{1}"),
        ];
        for document in bad {
            assert!(check_json(&document).is_err(), "{document}");
        }
        let path = check_json(&serde_json::json!({"items": [{"n": 1}, {"n": "\u{0}"}]}))
            .expect_err("refused");
        assert!(path.contains("$.items[1].n"), "{path}");
        assert!(check_json(&serde_json::json!({"name": "é", "n": [1, null, true]})).is_ok());
    }

    #[test]
    fn only_escapes_or_del_can_carry_a_control_character() {
        assert!(!json_may_hold_control(br#"{"name": "plain"}"#));
        assert!(json_may_hold_control(br#"{"name": "a\u0000"}"#));
        assert!(json_may_hold_control(br#"{"name": "a\tb"}"#));
        assert!(json_may_hold_control(b"{\"name\": \"a\x7f\"}"));
    }
}
