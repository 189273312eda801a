//! A request body read as JSON, each refusal classified as the contract asks: not JSON (broken
//! syntax, or bytes that are not UTF-8) is 400 `malformed-json`; JSON that is not a valid
//! request (a wrong type or value, an unknown field, a key given twice, a control character in
//! a string) is 422 `validation-failed`.

use serde::de::DeserializeOwned;
use shared::Problem;

use super::document;
use super::wording::worded;

/// JSON text is UTF-8 (RFC 8259 §8.1). Checked first and whole: serde decodes only the strings
/// it keeps, and skips the others (an ignored field) without looking inside. The text is then
/// read as `&str`, so serde does not check its strings again.
fn utf8(bytes: &[u8]) -> Result<&str, Problem> {
    std::str::from_utf8(bytes).map_err(|not_utf8| {
        Problem::malformed_json(format!(
            "the request body is not UTF-8, which JSON text must be: {not_utf8}"
        ))
    })
}

/// Parses a JSON document, classifying the failure the way the API reports it. A string or
/// key holding a control character is a 422 whatever the target type does with it, so no
/// such string reaches the database (PostgreSQL refuses NUL in `text`).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let text = utf8(bytes)?;
    if !shared::text::json_may_hold_control(bytes) {
        return serde_json::from_str(text).map_err(|e| refusal(bytes, &e));
    }
    // Read as a document that refuses a repeated key, as a typed body read at once does.
    let document::Document(document) =
        serde_json::from_str(text).map_err(|e| refusal(bytes, &e))?;
    shared::text::check_json(&document).map_err(Problem::validation)?;
    T::deserialize(document).map_err(|e| Problem::validation(worded(&e)))
}

/// A JSON document read whole, for a handler that looks at it before typing it: refused as
/// [`parse`] refuses, and also when an object gives a key twice (a typed body refuses a
/// repeated field; `Value` alone would keep the last one silently).
pub fn parse_document(bytes: &[u8]) -> Result<serde_json::Value, Problem> {
    let text = utf8(bytes)?;
    let document::Document(value) = serde_json::from_str(text).map_err(|e| refusal(bytes, &e))?;
    if shared::text::json_may_hold_control(bytes) {
        shared::text::check_json(&value).map_err(Problem::validation)?;
    }
    Ok(value)
}

/// Why `bytes` were refused, `error` being what serde met first. serde reads and checks types
/// in one pass, so its first error does not tell a broken document from a well-formed one
/// with a wrong value: `{"n": 1e4x}` fails on the float before the `x`, and `1e400` or a
/// number where a field takes one of some names fail as "syntax". The document's grammar,
/// checked on its own (`IgnoredAny` builds no value), decides: not JSON is a 400, JSON is a 422.
fn refusal(bytes: &[u8], error: &serde_json::Error) -> Problem {
    match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => {
            Problem::malformed_json("the request body is empty; a JSON document is required")
        }
        Err(grammar) => Problem::malformed_json(grammar.to_string()),
        // Well-formed, yet serde's reader refused it (a number no type holds, a value where
        // only certain names are accepted): it says "syntax" and names no field.
        Ok(_) if !error.is_data() => Problem::validation(format!(
            "the value at line {} column {} is not one its field accepts",
            error.line(),
            error.column()
        )),
        Ok(_) => Problem::validation(worded(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        n: u8,
    }

    #[test]
    fn broken_json_is_400_and_invalid_json_is_422() {
        let cases: &[(&str, u16)] = &[
            ("{", 400),
            ("", 400),
            ("{\"n\": 1,}", 400),
            ("not json", 400),
            ("{\"n\": 300}", 422),
            ("{\"n\": \"1\"}", 422),
            ("{\"n\": 1, \"status\": \"CONFIRMED\"}", 422),
            ("[]", 422),
            ("null", 422),
        ];
        for (body, status) in cases {
            let problem = parse::<Body>(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, *status, "{body}");
        }
        assert!(parse::<Body>(b"{\"n\": 1}").is_ok());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_broken_json_even_inside_a_string() {
        for body in [
            &b"{\"n\": 1, \"x\": \"\xff\"}"[..],
            // In a field serde skips without decoding it.
            b"{\"name\": \"ok\", \"x\": \"\xff\"}",
            b"{\"n\": \"\xc3\x28\"}",
            b"\xef\xbb",
        ] {
            let problem = parse::<Named>(body).expect_err("not UTF-8");
            assert_eq!(problem.status, 400, "{body:?}: {}", problem.detail);
        }
        // A string with escapes that decode to text is fine.
        assert!(parse::<Named>(br#"{"name": "caf\u00e9 \u2615"}"#).is_ok());
    }

    #[test]
    fn a_key_given_twice_is_422_however_the_body_is_read() {
        for body in [
            r#"{"name": "a", "name": "b"}"#,
            // An escape sends the body through the document read first.
            r#"{"name": "caf\u00e9", "name": "b"}"#,
        ] {
            let problem = parse::<Named>(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, 422, "{body}: {}", problem.detail);
            let problem = parse_document(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, 422, "{body}: {}", problem.detail);
        }
    }

    #[test]
    fn a_number_no_type_can_hold_is_out_of_range_not_broken() {
        let problem = parse::<Body>(br#"{"n": 1e400}"#).expect_err("1e400");
        assert_eq!(problem.status, 422, "{}", problem.detail);
        assert_eq!(
            parse::<Body>(br#"{"n": 1e4x}"#).expect_err("1e4x").status,
            400,
            "a number that is not one is still broken JSON"
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Named {
        name: String,
        #[serde(default)]
        tags: std::collections::HashMap<String, u8>,
    }

    #[test]
    fn a_control_character_in_any_string_or_key_is_422() {
        for body in [
            r#"{"name": "a\u0000"}"#,
            r#"{"name": "tab\there"}"#,
            "{\"name\": \"del\x7f\"}",
            r#"{"name": "ok", "tags": {"k\u001f": 1}}"#,
        ] {
            let problem = parse::<Named>(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, 422, "{body}");
        }
        assert!(parse::<Named>(r#"{"name": "caf\u00e9"}"#.as_bytes()).is_ok());
        // A raw control character inside a string is broken JSON, not a value.
        assert_eq!(
            parse::<Named>(b"{\"name\": \"a\x01\"}")
                .map_err(|p| p.status)
                .err(),
            Some(400)
        );
    }
}
