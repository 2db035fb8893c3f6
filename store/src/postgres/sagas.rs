//! Saga runs and steps on Postgres.

use sqlx::PgConnection;

pub(crate) use crate::portable::postgres::sagas::*;

/// Whether `attempt` is the job's running attempt; the row stays locked
/// until the transaction ends, so no other attempt can take over before
/// this one's writes commit.
pub(crate) async fn attempt_is_current(
    conn: &mut PgConnection,
    job_id: &str,
    attempt: i64,
) -> sqlx::Result<bool> {
    let row = sqlx::query(sql!(
        "SELECT 1 FROM jobs WHERE job_id = $1 AND attempts = $2 AND status = $3 FOR UPDATE"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(shared::model::JobStatus::Running.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}
