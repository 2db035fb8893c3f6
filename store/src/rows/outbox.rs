//! The outbox: the rows its statements read and write.

use crate::sql::Millis;

/// An outbox row with its job's tenant, rank and whether it is queued,
/// read without locking the job.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct OutboxRow {
    pub(crate) job_id: String,
    pub(crate) tenant_id: Option<String>,
    pub(crate) rank_at: Option<Millis>,
    /// `None` when the job is gone.
    pub(crate) queued: Option<bool>,
}

/// Where the lost-message sweep goes on from: the last job it looked at,
/// in the order of the queued jobs' index (kind, due time, id). The
/// default starts from the first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepCursor {
    pub(crate) kind: String,
    pub(crate) run_after: i64,
    pub(crate) job_id: String,
}

/// A queued job the sweep looks at, with its place in the sweep's order.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SweptRow {
    pub(crate) job_id: String,
    pub(crate) tenant_id: String,
    pub(crate) rank_at: Option<Millis>,
    pub(crate) kind: String,
    pub(crate) run_after: Millis,
}
