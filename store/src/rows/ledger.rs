//! The ledger: the rows its statements read and write.

/// Entries one import statement carries at most: an import of 10,000
/// entries goes out in a few statements, each a small part of the body.
pub(crate) const IMPORT_CHUNK: usize = 500;

use crate::sql::DateText;

/// An entry's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EntryRow {
    pub(crate) entry_id: String,
    pub(crate) entry_date: DateText,
    pub(crate) direction: String,
    pub(crate) amount_paise: i64,
    pub(crate) rate_centi: i64,
    pub(crate) interstate: bool,
    pub(crate) party: String,
    pub(crate) description: String,
}

/// One group of the GST aggregate as the statements return it; SGST equals
/// CGST, so it is not summed twice.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct GstSumRow {
    pub(crate) direction: String,
    pub(crate) rate_centi: i64,
    pub(crate) taxable: i64,
    pub(crate) igst: i64,
    pub(crate) cgst: i64,
}
