//! Ledger entries and the aggregates the reports read.

use std::collections::{HashMap, HashSet};

use chrono::NaiveDate;
use shared::{
    calendar::Date,
    ledger::{Direction, LedgerEntry},
    time::now_ms,
};
use sqlx::Connection;

use crate::{Error, Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::ledger::{EntryRow, GstSumRow};

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

impl TryFrom<EntryRow> for LedgerEntry {
    type Error = Error;

    fn try_from(row: EntryRow) -> Result<LedgerEntry> {
        Ok(LedgerEntry {
            direction: direction_of(&row.direction)?,
            entry_id: row.entry_id,
            date: row.entry_date.into(),
            amount_paise: row.amount_paise,
            rate_centi: row.rate_centi,
            interstate: row.interstate,
            party: row.party,
            description: row.description,
        })
    }
}

impl TryFrom<GstSumRow> for GstRow {
    type Error = Error;

    fn try_from(row: GstSumRow) -> Result<GstRow> {
        Ok(GstRow {
            direction: direction_of(&row.direction)?,
            rate_centi: row.rate_centi,
            taxable: row.taxable,
            igst: row.igst,
            cgst: row.cgst,
            sgst: row.cgst,
        })
    }
}

fn direction_of(text: &str) -> Result<Direction> {
    Direction::parse(text).ok_or_else(|| Error::Corrupt(format!("direction {text:?}")))
}

/// `text`'s day, for Postgres's `date` column: text that is no date is
/// refused there, as the column would refuse it.
fn day(text: &str) -> Result<NaiveDate> {
    Date::parse(text).map(Date::naive).ok_or_else(|| {
        sqlx::Error::Encode(format!("{text:?} is not a date written YYYY-MM-DD").into()).into()
    })
}

/// The day after `text`'s: the end of a range that includes `text`.
fn day_after(text: &str) -> Result<NaiveDate> {
    let last = day(text)?;
    last.succ_opt()
        .ok_or_else(|| sqlx::Error::Encode(format!("no day follows {last}").into()).into())
}

impl Store {
    /// Imports a batch all or nothing. A known id with the same content is
    /// skipped; a known id with other content fails the batch. Inserting with
    /// `ON CONFLICT DO NOTHING` first and comparing afterwards, inside the
    /// transaction, settles concurrent imports of the same ids.
    pub async fn import_entries(
        &self,
        outer: &mut WriteTx,
        tenant_id: &str,
        entries: &[LedgerEntry],
    ) -> Result<ImportOutcome> {
        // A savepoint: a conflicting batch (or a failed statement) is undone
        // without ending the caller's transaction, which still records the
        // 409 answer.
        let now = Millis(now_ms());
        on_tx!(outer,
            conn => {
                // sqlx knows this connection to be inside the caller's
                // transaction: its nested transaction is a savepoint.
                let mut savepoint = conn.begin().await?;
                let outcome = async {
                    let inserted =
                        postgres::ledger::insert_new(&mut savepoint, tenant_id, entries, now)
                            .await?;
                    let known = known_ids(entries, &inserted);
                    let stored = if known.is_empty() {
                        Vec::new()
                    } else {
                        postgres::ledger::stored(&mut savepoint, tenant_id, &known).await?
                    };
                    settle(entries, &inserted, stored)
                }
                .await;
                match &outcome {
                    Ok(ImportOutcome::Imported { .. }) => savepoint.commit().await?,
                    Ok(ImportOutcome::Conflict { .. }) | Err(_) => savepoint.rollback().await?,
                }
                outcome
            },
            conn => {
                // Written as SQL rather than a nested sqlx transaction: the
                // caller's transaction runs on the writing connection, which
                // sqlx does not know to be inside a transaction.
                sqlite::ledger::savepoint(conn).await?;
                let outcome = async {
                    let inserted =
                        sqlite::ledger::insert_new(conn, tenant_id, entries, now).await?;
                    let known = known_ids(entries, &inserted);
                    let stored = if known.is_empty() {
                        Vec::new()
                    } else {
                        sqlite::ledger::stored(conn, tenant_id, &known).await?
                    };
                    settle(entries, &inserted, stored)
                }
                .await;
                match &outcome {
                    Ok(ImportOutcome::Imported { .. }) => sqlite::ledger::release(conn).await?,
                    Ok(ImportOutcome::Conflict { .. }) | Err(_) => {
                        sqlite::ledger::roll_back_to(conn).await?
                    }
                }
                outcome
            },
        )
    }

    /// The GST aggregate over `[from, to]` (dates as `YYYY-MM-DD`), in SQL
    /// over the covering index, grouped by direction and rate.
    pub async fn gst_rows(&self, tenant_id: &str, from: &str, to: &str) -> Result<Vec<GstRow>> {
        let rows = on_pool!(self,
            pool => postgres::ledger::gst_rows(pool, tenant_id, day(from)?, day_after(to)?).await?,
            pool => sqlite::ledger::gst_rows(pool, tenant_id, from, to).await?,
        );
        rows.into_iter().map(GstRow::try_from).collect()
    }

    pub async fn count_entries(&self, tenant_id: &str, from: &str, to: &str) -> Result<i64> {
        Ok(on_pool!(self,
            pool => postgres::ledger::count(pool, tenant_id, day(from)?, day_after(to)?).await?,
            pool => sqlite::ledger::count(pool, tenant_id, from, to).await?,
        ))
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
        // beside `entry_date >= from`, each page scans the range from its
        // start.
        let (after_date, after_id) = after.unwrap_or((from, ""));
        let rows = on_pool!(self,
            pool => {
                let (after_date, until) = (day(after_date)?, day_after(to)?);
                postgres::ledger::page(pool, tenant_id, after_date, after_id, until, limit).await?
            },
            pool => sqlite::ledger::page(pool, tenant_id, after_date, after_id, to, limit).await?,
        );
        rows.into_iter().map(LedgerEntry::try_from).collect()
    }
}

/// The ids of `entries` the insert did not insert: known already, or
/// repeated in the batch.
fn known_ids(entries: &[LedgerEntry], inserted: &HashSet<String>) -> Vec<String> {
    let mut known: Vec<String> = entries
        .iter()
        .filter(|e| !inserted.contains(&e.entry_id))
        .map(|e| e.entry_id.clone())
        .collect();
    known.sort();
    known.dedup();
    known
}

/// The import's outcome, from the ids it inserted and the stored rows of
/// the others: skipped if stored with the same content, else a conflict.
fn settle(
    entries: &[LedgerEntry],
    inserted: &HashSet<String>,
    stored: Vec<EntryRow>,
) -> Result<ImportOutcome> {
    let stored = stored
        .into_iter()
        .map(|row| LedgerEntry::try_from(row).map(|e| (e.entry_id.clone(), e)))
        .collect::<Result<HashMap<_, _>>>()?;
    let known: Vec<&LedgerEntry> = entries
        .iter()
        .filter(|e| !inserted.contains(&e.entry_id))
        .collect();
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
        inserted: inserted.len(),
        skipped: known.len(),
    })
}
