//! Every statement on SQLite, by area. Times are unix milliseconds, flags
//! 0/1, JSON text; lists are bound as one JSON array and read with
//! `json_each`, so each statement has one text whatever the size of its
//! list. One process writes at a time (see `Store::write_turn`), so no
//! statement takes row locks.

pub(crate) mod attempts;
pub(crate) mod idempotency;
pub(crate) mod jobs;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod periods;
pub(crate) mod results;
pub(crate) mod sagas;
pub(crate) mod schedules;
pub(crate) mod secrets;
pub(crate) mod session;
pub(crate) mod submit;
#[cfg(feature = "test-hooks")]
pub(crate) mod test_hooks;

/// A list bound as one parameter: a JSON array, read back with `json_each`.
pub(crate) fn json_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    serde_json::Value::Array(
        items
            .into_iter()
            .map(|item| serde_json::Value::String(item.to_owned()))
            .collect(),
    )
    .to_string()
}
pub(crate) mod audit;
pub(crate) mod dashboard;
pub(crate) mod gauges;
pub(crate) mod keys;
pub(crate) mod kinds;
pub(crate) mod retention;
pub(crate) mod webhooks;
pub(crate) mod work;

/// Moves the versions of applied migrations that were renamed to their
/// present names (see `Store::migrate`); nothing when none was applied.
/// Only the old numbers themselves: migrations written since on those
/// days have numbers of their own.
pub(crate) async fn carry_renamed_migrations(
    conn: &mut sqlx::SqliteConnection,
) -> sqlx::Result<u64> {
    let applied: bool = sqlx::query_scalar(sql!(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = 'receipt_migrations')"
    ))
    .fetch_one(&mut *conn)
    .await?;
    if !applied {
        return Ok(0);
    }
    let moved = sqlx::query(sql!(
        "UPDATE receipt_migrations SET version = 20261205000000 + version % 1000000 \
         WHERE version IN (20261206000090, 20261207000100, 20261208000110, 20261208000120, \
                           20261208000130, 20261208000140, 20261209000150, 20261210000160, \
                           20261211000170)"
    ))
    .execute(conn)
    .await?;
    Ok(moved.rows_affected())
}
