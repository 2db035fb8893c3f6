//! Ledger entries on Postgres: a date is a `date`, a range `[from, until)`.

use std::collections::HashSet;

use chrono::NaiveDate;
use shared::ledger::LedgerEntry;
use sqlx::{PgConnection, PgExecutor};

use crate::{
    rows::ledger::{EntryRow, GstSumRow},
    sql::{DateText, Millis},
};

/// Inserts the entries whose ids are new, a chunk of
/// [`IMPORT_CHUNK`](crate::rows::ledger::IMPORT_CHUNK) per statement, so that what one statement carries stays
/// small whatever the size of the import; returns the ids inserted.
pub(crate) async fn insert_new(
    conn: &mut PgConnection,
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

/// One chunk's statement: one array per column.
async fn insert_chunk(
    conn: &mut PgConnection,
    tenant_id: &str,
    entries: &[LedgerEntry],
    now: Millis,
) -> sqlx::Result<HashSet<String>> {
    let mut ids = Vec::with_capacity(entries.len());
    let mut dates = Vec::with_capacity(entries.len());
    let mut directions = Vec::with_capacity(entries.len());
    let mut amounts = Vec::with_capacity(entries.len());
    let mut rates = Vec::with_capacity(entries.len());
    let mut interstates = Vec::with_capacity(entries.len());
    let mut parties = Vec::with_capacity(entries.len());
    let mut descriptions = Vec::with_capacity(entries.len());
    for entry in entries {
        ids.push(entry.entry_id.as_str());
        dates.push(DateText(entry.date.clone()));
        directions.push(entry.direction.as_str());
        amounts.push(entry.amount_paise);
        rates.push(entry.rate_centi);
        interstates.push(entry.interstate);
        parties.push(entry.party.as_str());
        descriptions.push(entry.description.as_str());
    }
    let inserted: Vec<String> = sqlx::query_scalar(sql!(
        "INSERT INTO ledger_entries (tenant_id, entry_id, entry_date, direction, amount_paise,
             rate_centi, interstate, party, description, created_at)
         SELECT $1, e.entry_id, e.entry_date, e.direction, e.amount_paise, e.rate_centi,
                e.interstate, e.party, e.description, $10
         FROM UNNEST($2::text[], $3::date[], $4::text[], $5::int8[], $6::int8[], $7::bool[],
                     $8::text[], $9::text[])
             AS e (entry_id, entry_date, direction, amount_paise, rate_centi, interstate,
                   party, description)
         ON CONFLICT (tenant_id, entry_id) DO NOTHING
         RETURNING entry_id"
    ))
    .bind(tenant_id)
    .bind(ids)
    .bind(dates)
    .bind(directions)
    .bind(amounts)
    .bind(rates)
    .bind(interstates)
    .bind(parties)
    .bind(descriptions)
    .bind(now)
    .fetch_all(conn)
    .await?;
    Ok(inserted.into_iter().collect())
}

/// The stored entries of `entry_ids`.
pub(crate) async fn stored(
    conn: &mut PgConnection,
    tenant_id: &str,
    entry_ids: &[String],
) -> sqlx::Result<Vec<EntryRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party,
                description
         FROM ledger_entries WHERE tenant_id = $1 AND entry_id = ANY ($2)"
    ))
    .bind(tenant_id)
    .bind(entry_ids)
    .fetch_all(conn)
    .await
}

/// Answered from the covering index `ledger_gst`.
pub(crate) async fn gst_rows(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    from: NaiveDate,
    until: NaiveDate,
) -> sqlx::Result<Vec<GstSumRow>> {
    sqlx::query_as(sql!(
        "SELECT direction, rate_centi,
             CAST(SUM(amount_paise) AS BIGINT) AS taxable,
             CAST(SUM(CASE WHEN interstate
                           THEN (amount_paise * rate_centi + 5000) / 10000 ELSE 0 END)
                  AS BIGINT) AS igst,
             CAST(SUM(CASE WHEN interstate
                           THEN 0 ELSE (amount_paise * rate_centi + 10000) / 20000 END)
                  AS BIGINT) AS cgst
         FROM ledger_entries
         WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date < $3
         GROUP BY direction, rate_centi
         ORDER BY direction, rate_centi"
    ))
    .bind(tenant_id)
    .bind(from)
    .bind(until)
    .fetch_all(db)
    .await
}

pub(crate) async fn count(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    from: NaiveDate,
    until: NaiveDate,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM ledger_entries
         WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date < $3"
    ))
    .bind(tenant_id)
    .bind(from)
    .bind(until)
    .fetch_one(db)
    .await
}

/// Entries after `(after_date, after_id)` and before `until`, in
/// `ledger_by_date`'s order.
pub(crate) async fn page(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    after_date: NaiveDate,
    after_id: &str,
    until: NaiveDate,
    limit: i64,
) -> sqlx::Result<Vec<EntryRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party,
                description
         FROM ledger_entries
         WHERE tenant_id = $1 AND (entry_date, entry_id) > ($2, $3) AND entry_date < $4
         ORDER BY entry_date, entry_id LIMIT $5"
    ))
    .bind(tenant_id)
    .bind(after_date)
    .bind(after_id)
    .bind(until)
    .bind(limit)
    .fetch_all(db)
    .await
}
