//! Ledger entries on SQLite: a date is its text `YYYY-MM-DD`, whose order
//! is date order; a range is `[from, to]`.

use std::collections::HashSet;

use serde_json::json;
use shared::ledger::LedgerEntry;
use sqlx::{SqliteConnection, SqliteExecutor};

use crate::{
    rows::ledger::{EntryRow, GstSumRow},
    sql::Millis,
};

/// The import's savepoint, inside the caller's transaction.
pub(crate) async fn savepoint(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    sqlx::query(sql!("SAVEPOINT ledger_import"))
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) async fn release(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    sqlx::query(sql!("RELEASE SAVEPOINT ledger_import"))
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) async fn roll_back_to(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    sqlx::query(sql!("ROLLBACK TO SAVEPOINT ledger_import"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Inserts the entries whose ids are new, a chunk of
/// [`IMPORT_CHUNK`](crate::rows::ledger::IMPORT_CHUNK) per statement, so that what one statement carries stays
/// small whatever the size of the import; returns the ids inserted.
pub(crate) async fn insert_new(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    entries: &[LedgerEntry],
    now: Millis,
) -> sqlx::Result<HashSet<String>> {
    let mut inserted = HashSet::new();
    for chunk in entries.chunks(crate::rows::ledger::IMPORT_CHUNK) {
        inserted.extend(insert_chunk(&mut *conn, tenant_id, chunk, now).await?);
    }
    Ok(inserted)
}

/// One chunk's statement: the rows as one JSON array.
async fn insert_chunk(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    entries: &[LedgerEntry],
    now: Millis,
) -> sqlx::Result<HashSet<String>> {
    let rows: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            json!({
                "entry_id": e.entry_id,
                "entry_date": e.date,
                "direction": e.direction.as_str(),
                "amount_paise": e.amount_paise,
                "rate_centi": e.rate_centi,
                "interstate": i64::from(e.interstate),
                "party": e.party,
                "description": e.description,
            })
        })
        .collect();
    // `WHERE true`: an INSERT from a SELECT with an upsert clause needs a
    // WHERE for SQLite to tell its ON CONFLICT from a join's ON.
    let inserted: Vec<String> = sqlx::query_scalar(sql!(
        "INSERT INTO ledger_entries (tenant_id, entry_id, entry_date, direction, amount_paise,
             rate_centi, interstate, party, description, created_at)
         SELECT $1, json_extract(e.value, '$.entry_id'), json_extract(e.value, '$.entry_date'),
                json_extract(e.value, '$.direction'), json_extract(e.value, '$.amount_paise'),
                json_extract(e.value, '$.rate_centi'), json_extract(e.value, '$.interstate'),
                json_extract(e.value, '$.party'), json_extract(e.value, '$.description'), $3
         FROM json_each($2) AS e
         WHERE true
         ON CONFLICT (tenant_id, entry_id) DO NOTHING
         RETURNING entry_id"
    ))
    .bind(tenant_id)
    .bind(serde_json::Value::Array(rows).to_string())
    .bind(now)
    .fetch_all(conn)
    .await?;
    Ok(inserted.into_iter().collect())
}

/// The stored entries of `entry_ids`.
pub(crate) async fn stored(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    entry_ids: &[String],
) -> sqlx::Result<Vec<EntryRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party,
                description
         FROM ledger_entries
         WHERE tenant_id = $1 AND entry_id IN (SELECT value FROM json_each($2))"
    ))
    .bind(tenant_id)
    .bind(serde_json::to_string(entry_ids).map_err(|e| sqlx::Error::Encode(e.into()))?)
    .fetch_all(conn)
    .await
}

/// Answered from the covering index `ledger_gst`.
pub(crate) async fn gst_rows(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    from: &str,
    to: &str,
) -> sqlx::Result<Vec<GstSumRow>> {
    sqlx::query_as(sql!(
        "SELECT direction, rate_centi,
             CAST(SUM(amount_paise) AS BIGINT) AS taxable,
             CAST(SUM(CASE WHEN interstate = 1
                           THEN (amount_paise * rate_centi + 5000) / 10000 ELSE 0 END)
                  AS BIGINT) AS igst,
             CAST(SUM(CASE WHEN interstate = 1
                           THEN 0 ELSE (amount_paise * rate_centi + 10000) / 20000 END)
                  AS BIGINT) AS cgst
         FROM ledger_entries
         WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date <= $3
         GROUP BY direction, rate_centi
         ORDER BY direction, rate_centi"
    ))
    .bind(tenant_id)
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await
}

pub(crate) async fn count(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    from: &str,
    to: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM ledger_entries
         WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date <= $3"
    ))
    .bind(tenant_id)
    .bind(from)
    .bind(to)
    .fetch_one(db)
    .await
}

/// Entries after `(after_date, after_id)` up to `to`, in
/// `ledger_by_date`'s order.
pub(crate) async fn page(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    after_date: &str,
    after_id: &str,
    to: &str,
    limit: i64,
) -> sqlx::Result<Vec<EntryRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party,
                description
         FROM ledger_entries
         WHERE tenant_id = $1 AND (entry_date, entry_id) > ($2, $3) AND entry_date <= $4
         ORDER BY entry_date, entry_id LIMIT $5"
    ))
    .bind(tenant_id)
    .bind(after_date)
    .bind(after_id)
    .bind(to)
    .bind(limit)
    .fetch_all(db)
    .await
}
