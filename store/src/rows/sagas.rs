//! Sagas: the rows its statements read and write.

use crate::sql::{JsonText, Millis};

/// A run's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunRow {
    pub(crate) phase: String,
    pub(crate) cause: Option<String>,
    pub(crate) error_type: Option<String>,
    pub(crate) error_message: Option<String>,
}

/// A step's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StepRow {
    pub(crate) step_index: i64,
    pub(crate) name: String,
    pub(crate) outcome: String,
    pub(crate) attempts: i64,
    pub(crate) started_at: Millis,
    pub(crate) finished_at: Option<Millis>,
    pub(crate) error_type: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) output: Option<JsonText>,
    pub(crate) compensation: String,
    pub(crate) compensation_attempts: i64,
    pub(crate) compensation_started_at: Option<Millis>,
    pub(crate) compensation_finished_at: Option<Millis>,
    pub(crate) compensation_error_type: Option<String>,
    pub(crate) compensation_error_message: Option<String>,
}

/// A phase's row: why it turned back, as the columns `cause`,
/// `error_type`, `error_message` hold it (`NULL` keeps what is stored).
pub(crate) struct PhaseWrite<'a> {
    pub job_id: &'a str,
    pub phase: &'static str,
    pub cause: Option<&'static str>,
    pub error_type: Option<&'a str>,
    pub error_message: Option<&'a str>,
    pub now: Millis,
}

/// A step's error as written: its outcome, when it finished, and its
/// compensation.
pub(crate) struct StepError<'a> {
    pub outcome: &'static str,
    pub finished_at: Option<Millis>,
    pub error_type: &'a str,
    pub error_message: &'a str,
    pub compensation: &'static str,
}
