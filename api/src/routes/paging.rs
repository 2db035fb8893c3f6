//! What every list endpoint shares: `limit` (1 to 200, default 50), an
//! opaque `cursor` (the last id of the previous page), and the page cut.

use std::collections::HashMap;

use shared::ledger::FieldError;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// `prefix` + 32 hex digits: the shape of every id this API hands out.
pub fn is_id(text: &str, prefix: &str) -> bool {
    text.len() == prefix.len() + 32
        && text.starts_with(prefix)
        && text[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reads `limit` and `cursor`, adding to `errors` what is wrong with them.
pub fn limit_and_cursor(
    query: &HashMap<String, String>,
    id_prefix: &str,
    errors: &mut Vec<FieldError>,
) -> (i64, Option<String>) {
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                errors.push(FieldError::new(
                    "limit",
                    "must be a whole number from 1 to 200",
                ));
                DEFAULT_LIMIT
            }
        },
    };
    let cursor = query.get("cursor").filter(|c| !c.is_empty()).cloned();
    if cursor.as_deref().is_some_and(|c| !is_id(c, id_prefix)) {
        errors.push(FieldError::new(
            "cursor",
            "is not a cursor this API returned",
        ));
    }
    (limit, cursor)
}

/// Cuts the one-extra row the store returned, and names the next cursor.
pub fn cut<T>(mut rows: Vec<T>, limit: i64, id: impl Fn(&T) -> String) -> (Vec<T>, Option<String>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() > limit {
        rows.truncate(limit);
        let next = rows.last().map(&id);
        (rows, next)
    } else {
        (rows, None)
    }
}
