//! The list endpoints' shared rules: `limit` defaults to 20 and is capped at 100; 0, negative
//! or non-numeric values are a 422. `after` is an opaque cursor the previous page returned.

use serde::{Deserialize, Serialize};
use shared::Problem;

pub const DEFAULT_LIMIT: i64 = 20;
pub const MAX_LIMIT: i64 = 100;

/// Parses the raw `limit` parameter (kept as text so a bad value gets a clear message).
pub fn limit(raw: Option<&str>) -> Result<i64, Problem> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_LIMIT);
    };
    match raw.trim().parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n.min(MAX_LIMIT)),
        Ok(_) => Err(Problem::validation("limit must be at least 1")),
        // Too large to parse is still "a large number": cap it like any other.
        Err(_) if !raw.trim().is_empty() && raw.trim().bytes().all(|b| b.is_ascii_digit()) => {
            Ok(MAX_LIMIT)
        }
        Err(_) => Err(Problem::validation(format!(
            "limit must be a positive integer, got {raw:?}"
        ))),
    }
}

/// A page of items and the cursor of the next page (`null` on the last one).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `after` to get the next page; `null` when this is the last page.
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// Builds a page from up to `limit + 1` rows: the extra row only proves a next page exists.
    pub fn from_rows(mut rows: Vec<T>, limit: i64, cursor_of: impl Fn(&T) -> String) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(cursor_of)
        } else {
            None
        };
        Self { items: rows, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_the_contract() {
        assert_eq!(limit(None).ok(), Some(20));
        assert_eq!(limit(Some("5")).ok(), Some(5));
        assert_eq!(limit(Some("100")).ok(), Some(100));
        assert_eq!(limit(Some("101")).ok(), Some(100));
        assert_eq!(limit(Some("99999999999999999999999")).ok(), Some(100));
        for bad in ["0", "-1", "abc", "", "1.5"] {
            assert_eq!(limit(Some(bad)).map_err(|p| p.status), Err(422), "{bad}");
        }
    }

    #[test]
    fn a_page_knows_whether_more_follow() {
        let page = Page::from_rows(vec![1, 2, 3], 2, |n| n.to_string());
        assert_eq!(page.items, vec![1, 2]);
        assert_eq!(page.next.as_deref(), Some("2"));
        let last = Page::from_rows(vec![1, 2], 2, |n| n.to_string());
        assert_eq!(last.next, None);
    }
}
