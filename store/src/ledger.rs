//! Ledger entries and the aggregates the reports read.

use std::collections::HashMap;

use sqlx::{Row, any::AnyRow};

use super::{Store, built};
use crate::Result;
use shared::{
    ledger::{Direction, LedgerEntry},
    time::now_ms,
};

/// Rows per multi-row statement: 9 parameters each stays under SQLite's
/// 32,766-parameter limit and Postgres's 65,535.
const INSERT_CHUNK: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported {
        inserted: usize,
        skipped: usize,
    },
    /// Known ids with different content; nothing was stored.
    Conflict {
        ids: Vec<String>,
    },
}

/// One group of the GST aggregate: sums in paise, each tax computed per
/// entry and rounded half up before summing, exactly as `ledger::tax_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GstRow {
    pub direction: Direction,
    pub rate_centi: i64,
    pub taxable: i64,
    pub igst: i64,
    pub cgst: i64,
    pub sgst: i64,
}

fn entry_from_row(row: &AnyRow) -> Result<LedgerEntry> {
    let direction: String = row.try_get("direction")?;
    Ok(LedgerEntry {
        entry_id: row.try_get("entry_id")?,
        date: row.try_get("entry_date")?,
        direction: Direction::parse(&direction)
            .ok_or_else(|| crate::Error::Corrupt(format!("direction {direction:?}")))?,
        amount_paise: row.try_get("amount_paise")?,
        rate_centi: row.try_get("rate_centi")?,
        interstate: row.try_get::<i64, _>("interstate")? != 0,
        party: row.try_get("party")?,
        description: row.try_get("description")?,
    })
}

const ENTRY_COLUMNS: &str =
    "entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party, description";

impl Store {
    /// Imports a batch all or nothing. A known id with the same content is
    /// skipped; a known id with other content fails the batch. Inserting with
    /// `ON CONFLICT DO NOTHING` first and comparing afterwards, inside the
    /// transaction, settles concurrent imports of the same ids.
    pub async fn import_entries(
        &self,
        outer: &mut super::WriteTx,
        tenant_id: &str,
        entries: &[LedgerEntry],
    ) -> Result<ImportOutcome> {
        // A savepoint: a conflicting batch (or a failed statement) is undone
        // without ending the caller's transaction, which still records the
        // 409 answer. Written as SQL rather than a nested sqlx transaction:
        // on SQLite the caller's transaction runs on the writing connection,
        // which sqlx does not know to be inside a transaction.
        sqlx::query("SAVEPOINT ledger_import")
            .execute(&mut **outer)
            .await?;
        let outcome = insert_and_compare(outer, tenant_id, entries).await;
        let end = match &outcome {
            Ok(ImportOutcome::Imported { .. }) => "RELEASE SAVEPOINT ledger_import",
            Ok(ImportOutcome::Conflict { .. }) | Err(_) => "ROLLBACK TO SAVEPOINT ledger_import",
        };
        sqlx::query(end).execute(&mut **outer).await?;
        outcome
    }

    /// The GST aggregate over `[from, to]` (dates as `YYYY-MM-DD`), in SQL
    /// over the covering index, grouped by direction and rate.
    pub async fn gst_rows(&self, tenant_id: &str, from: &str, to: &str) -> Result<Vec<GstRow>> {
        let rows = sqlx::query(
            "SELECT direction, rate_centi,
                 CAST(SUM(amount_paise) AS BIGINT) AS taxable,
                 CAST(SUM(CASE WHEN interstate = 1
                               THEN (amount_paise * rate_centi + 5000) / 10000 ELSE 0 END) AS BIGINT) AS igst,
                 CAST(SUM(CASE WHEN interstate = 1
                               THEN 0 ELSE (amount_paise * rate_centi + 10000) / 20000 END) AS BIGINT) AS cgst
             FROM ledger_entries
             WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date <= $3
             GROUP BY direction, rate_centi
             ORDER BY direction, rate_centi",
        )
        .bind(tenant_id)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let direction: String = row.try_get("direction")?;
                let cgst: i64 = row.try_get("cgst")?;
                Ok(GstRow {
                    direction: Direction::parse(&direction)
                        .ok_or_else(|| crate::Error::Corrupt(format!("direction {direction:?}")))?,
                    rate_centi: row.try_get("rate_centi")?,
                    taxable: row.try_get("taxable")?,
                    igst: row.try_get("igst")?,
                    cgst,
                    sgst: cgst,
                })
            })
            .collect()
    }

    pub async fn count_entries(&self, tenant_id: &str, from: &str, to: &str) -> Result<i64> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM ledger_entries
             WHERE tenant_id = $1 AND entry_date >= $2 AND entry_date <= $3",
        )
        .bind(tenant_id)
        .bind(from)
        .bind(to)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("n")?)
    }

    /// One page of entries in `[from, to]` by date then id, after `after`
    /// (a `(date, id)` keyset cursor).
    pub async fn entries_page(
        &self,
        tenant_id: &str,
        from: &str,
        to: &str,
        after: Option<(&str, &str)>,
        limit: i64,
    ) -> Result<Vec<LedgerEntry>> {
        // The first page starts after `(from, "")`: no id is empty. One
        // row-value bound, and no separate `entry_date >= from`, is what
        // lets both databases seek the index to the cursor; with the bound
        // written out (`entry_date > $d OR (entry_date = $d AND ..)`) or
        // beside `entry_date >= from`, every page scanned the range from
        // its start (Postgres: 400 ms a page at 1,000,000 entries).
        let (after_date, after_id) = after.unwrap_or((from, ""));
        let rows = sqlx::query(built(&format!(
            "SELECT {ENTRY_COLUMNS} FROM ledger_entries
             WHERE tenant_id = $1 AND (entry_date, entry_id) > ($2, $3) AND entry_date <= $4
             ORDER BY entry_date, entry_id LIMIT $5"
        )))
        .bind(tenant_id)
        .bind(after_date)
        .bind(after_id)
        .bind(to)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(entry_from_row).collect()
    }
}

/// The import itself, inside [`Store::import_entries`]'s savepoint.
async fn insert_and_compare(
    conn: &mut sqlx::AnyConnection,
    tenant_id: &str,
    entries: &[LedgerEntry],
) -> Result<ImportOutcome> {
    let now = now_ms();

    let mut inserted_ids = std::collections::HashSet::new();
    for chunk in entries.chunks(INSERT_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO ledger_entries (tenant_id, entry_id, entry_date, direction, amount_paise,
                 rate_centi, interstate, party, description, created_at) VALUES ",
        );
        for i in 0..chunk.len() {
            let p = i * 9;
            if i > 0 {
                sql.push_str(", ");
            }
            sql += &format!(
                "($1, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6,
                p + 7,
                p + 8,
                p + 9,
                p + 10
            );
        }
        sql.push_str(" ON CONFLICT (tenant_id, entry_id) DO NOTHING RETURNING entry_id");
        let mut query = sqlx::query(built(&sql)).bind(tenant_id);
        for entry in chunk {
            query = query
                .bind(&entry.entry_id)
                .bind(&entry.date)
                .bind(entry.direction.as_str())
                .bind(entry.amount_paise)
                .bind(entry.rate_centi)
                .bind(i64::from(entry.interstate))
                .bind(&entry.party)
                .bind(&entry.description)
                .bind(now);
        }
        for row in query.fetch_all(&mut *conn).await? {
            inserted_ids.insert(row.try_get::<String, _>("entry_id")?);
        }
    }
    let known: Vec<&LedgerEntry> = entries
        .iter()
        .filter(|e| !inserted_ids.contains(&e.entry_id))
        .collect();
    let mut stored = HashMap::new();
    for chunk in known.chunks(INSERT_CHUNK) {
        let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE tenant_id = $1 AND entry_id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(built(&sql)).bind(tenant_id);
        for entry in chunk {
            query = query.bind(&entry.entry_id);
        }
        for row in query.fetch_all(&mut *conn).await? {
            let entry = entry_from_row(&row)?;
            stored.insert(entry.entry_id.clone(), entry);
        }
    }
    let mut conflicts: Vec<String> = known
        .iter()
        .filter(|e| stored.get(&e.entry_id) != Some(**e))
        .map(|e| e.entry_id.clone())
        .collect();
    if !conflicts.is_empty() {
        conflicts.sort();
        conflicts.dedup();
        return Ok(ImportOutcome::Conflict { ids: conflicts });
    }
    Ok(ImportOutcome::Imported {
        inserted: inserted_ids.len(),
        skipped: known.len(),
    })
}
