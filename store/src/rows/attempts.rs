//! Attempts: the rows its statements read and write.

use crate::sql::{JsonText, Millis};
use shared::{
    model::{JobErrorObject, JobStatus},
    settings::Caps,
};

/// A claimed job's row, as both databases' claims return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ClaimRow {
    pub(crate) job_id: String,
    pub(crate) tenant_id: String,
    pub(crate) kind: String,
    pub(crate) params: JsonText,
    pub(crate) attempts: i64,
    pub(crate) handbacks: i64,
    pub(crate) max_attempts: i64,
    pub(crate) created_at: Millis,
    pub(crate) traceparent: Option<String>,
}

/// An attempt's end without a result, as the statements bind it.
pub(crate) struct AttemptEnd<'a> {
    pub(crate) status: JobStatus,
    pub(crate) finished_at: Option<Millis>,
    pub(crate) run_after: Option<Millis>,
    pub(crate) error: Option<&'a JobErrorObject>,
    /// Not counted against the attempt limit (`handbacks` + 1).
    pub(crate) handed_back: bool,
}

/// A successful attempt's result, as the statements bind it: a document,
/// or the number of chunks the attempt wrote.
pub(crate) struct Success<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) attempt: i64,
    pub(crate) document: Option<&'a str>,
    pub(crate) chunks: Option<i64>,
}

/// Jobs parked at one cap: the tenant's (`kind` NULL) or a kind's.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ParkedGroup {
    pub(crate) tenant_id: String,
    pub(crate) kind: Option<String>,
    pub(crate) capped: String,
    pub(crate) parked: i64,
}

/// A running job whose lease lapsed, as the sweeper finds it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LapsedRow {
    pub(crate) job_id: String,
    pub(crate) counted: i64,
    pub(crate) max_attempts: i64,
    pub(crate) handbacks: i64,
    /// A worker over HTTP never took the lease up (see
    /// `Store::requeue_lapsed_leases`).
    pub(crate) untaken: bool,
    pub(crate) saga_unfinished: bool,
}

/// A claim of due jobs (`Store::claim_due`), as the statements bind it.
pub(crate) struct DueClaim<'a> {
    pub(crate) worker_id: &'a str,
    pub(crate) most: i64,
    pub(crate) after_tenant: &'a str,
    pub(crate) now: Millis,
    /// The latest rank a due job can have: now, plus two steps of aging.
    pub(crate) rank_before: Millis,
    pub(crate) lease_until: Millis,
    pub(crate) caps: &'a Caps,
}
