//! Jobs: the rows its statements read and write.

use crate::sql::{JsonText, Millis};

/// A job's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct JobRow {
    pub(crate) job_id: String,
    pub(crate) tenant_id: String,
    pub(crate) kind: String,
    pub(crate) params: JsonText,
    pub(crate) status: String,
    pub(crate) attempts: i64,
    pub(crate) max_attempts: i64,
    pub(crate) progress: Option<f64>,
    pub(crate) created_at: Millis,
    pub(crate) started_at: Option<Millis>,
    pub(crate) finished_at: Option<Millis>,
    pub(crate) run_after: Millis,
    pub(crate) error_type: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) cancel_requested: bool,
    pub(crate) handbacks: i64,
    pub(crate) retry_of: Option<String>,
    pub(crate) schedule_id: Option<String>,
    pub(crate) priority: String,
    pub(crate) capped: Option<String>,
    pub(crate) worker_id: Option<String>,
    pub(crate) error_details: Option<JsonText>,
}
