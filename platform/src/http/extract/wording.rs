//! Parse errors as a client may read them: serde names the Rust types it expected (`struct
//! CreateOrderRequest`, `untagged enum AmountInput`), which are no business of the API's.

/// `error`'s message with each Rust type it names replaced by what the client should send.
pub(super) fn worded(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let mut out = String::with_capacity(message.len());
    let mut rest = message.as_str();
    while let Some((at, kind, name_len)) = next_type_name(rest) {
        let before = &rest[..at];
        match kind {
            "struct " => {
                out.push_str(before);
                out.push_str("a JSON object");
            }
            "untagged enum " => {
                out.push_str(
                    before
                        .strip_suffix("did not match any variant of ")
                        .unwrap_or(before),
                );
                out.push_str("matched none of the accepted forms");
            }
            _ => {
                out.push_str(before);
                out.push_str("one of the documented values");
            }
        }
        rest = &rest[at + kind.len() + name_len..];
        // `… with 3 elements` counts the fields of the Rust struct, not anything sent.
        if let Some(after) = rest.strip_prefix(" with ")
            && let Some(end) = after.find(" elements")
            && after[..end].chars().all(|c| c.is_ascii_digit())
        {
            rest = &after[end + " elements".len()..];
        }
    }
    out.push_str(rest);
    out
}

/// The first `struct Name`, `untagged enum Name` or `enum Name` in `text`: where it starts,
/// which keyword, and the length of the name after it.
fn next_type_name(text: &str) -> Option<(usize, &'static str, usize)> {
    ["untagged enum ", "struct ", "enum "]
        .into_iter()
        .filter_map(|kind| {
            let mut from = 0;
            while let Some(found) = text[from..].find(kind) {
                let at = from + found;
                let name = &text[at + kind.len()..];
                let len = name
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                let starts_a_word = at == 0 || text[..at].ends_with(' ');
                if len > 0 && starts_a_word && name.starts_with(|c: char| c.is_ascii_uppercase()) {
                    return Some((at, kind, len));
                }
                from = at + kind.len();
            }
            None
        })
        .min_by_key(|&(at, kind, _)| (at, std::cmp::Reverse(kind.len())))
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct CreateThing {
        name: String,
        count: u8,
        shape: Shape,
        either: Either,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Shape {
        Round,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Either {
        Number(u8),
        Text(String),
    }

    #[test]
    fn refusals_never_name_the_types_behind_the_api() {
        for body in [
            "null",
            "[1]",
            "[1, 2, 3, 4, 5]",
            r#"{"name": "a", "count": 1, "shape": 7, "either": 1}"#,
            r#"{"name": "a", "count": 1, "shape": "Round", "either": true}"#,
            r#"{"name": "a", "count": 1, "shape": "Round", "either": [1]}"#,
        ] {
            let problem = parse::<CreateThing>(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, 422, "{body}");
            for internal in [
                "CreateThing",
                "Shape",
                "Either",
                "struct",
                "enum",
                "elements",
            ] {
                assert!(
                    !problem.detail.contains(internal),
                    "{body}: {}",
                    problem.detail
                );
            }
        }
        let problem = parse::<CreateThing>(b"null").expect_err("null");
        assert!(
            problem
                .detail
                .starts_with("invalid type: null, expected a JSON object"),
            "{}",
            problem.detail
        );
    }
}
