//! The worker protocol: the rows its statements read and write.

use crate::{
    rows::attempts::ClaimRow,
    sql::{JsonText, Millis},
};

/// A leased attempt: its claimed job's row, with the lease's terms.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LeasedRow {
    #[sqlx(flatten)]
    pub(crate) claim: ClaimRow,
    pub(crate) priority: String,
    pub(crate) lease_expires_at: Millis,
    pub(crate) attempt_deadline: Millis,
}

/// What a heartbeat of a held attempt returns.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct HeartbeatRow {
    pub(crate) cancel_requested: bool,
    pub(crate) lease_expires_at: Millis,
    pub(crate) attempt_deadline: Millis,
}

/// An external job's state, read to say why a call on its attempt was
/// refused, or to answer a retried one as the first was answered.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AttemptStateRow {
    pub(crate) job_id: String,
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) attempts: i64,
    pub(crate) handbacks: i64,
    pub(crate) max_attempts: i64,
    pub(crate) cancel_requested: bool,
    pub(crate) run_after: Millis,
    pub(crate) attempt_deadline: Option<Millis>,
    pub(crate) error_type: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) worker_id: Option<String>,
}

/// An external job a batch of reports names: its state, and whether its
/// kind takes a JSON result.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ReportedJobRow {
    #[sqlx(flatten)]
    pub(crate) state: AttemptStateRow,
    pub(crate) takes_json: bool,
}

/// A worker over HTTP, as the list of a tenant's workers reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WorkerRow {
    pub(crate) name: String,
    pub(crate) kinds: JsonText,
    pub(crate) first_seen_at: Millis,
    pub(crate) last_seen_at: Millis,
    pub(crate) leased: i64,
    pub(crate) failed: i64,
    pub(crate) holding: i64,
}

/// A lease of external attempts, as the statements bind it.
pub(crate) struct LeaseTerms<'a> {
    pub(crate) tenant_id: &'a str,
    pub(crate) kinds: &'a [String],
    /// Each kind's timeout of an attempt, in the order of `kinds`.
    pub(crate) timeouts_ms: &'a [i64],
    pub(crate) most: i64,
    pub(crate) now: Millis,
    /// The latest rank a due job can have (see `Store::claim_due`).
    pub(crate) rank_before: Millis,
    pub(crate) lease_until: Millis,
    pub(crate) worker_id: &'a str,
    /// The worker's own name (`worker_id` is `http:{worker}`).
    pub(crate) worker: &'a str,
    /// Note the worker as seen even when the lease takes nothing.
    pub(crate) note_seen: bool,
}
