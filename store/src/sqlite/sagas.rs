//! Saga runs and steps on SQLite. No row lock: one writer at a time
//! already keeps another attempt from taking over mid-transaction.

use sqlx::SqliteConnection;

pub(crate) use crate::portable::sqlite::sagas::*;

/// Whether `attempt` is the job's running attempt.
pub(crate) async fn attempt_is_current(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
) -> sqlx::Result<bool> {
    let row = sqlx::query(sql!(
        "SELECT 1 FROM jobs WHERE job_id = $1 AND attempts = $2 AND status = $3"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(shared::model::JobStatus::Running.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}
