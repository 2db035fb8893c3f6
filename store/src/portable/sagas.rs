//! Saga runs and steps, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::sagas::{PhaseWrite, RunRow, StepError, StepRow},
    sql::{JsonText, Millis},
};

pub(crate) async fn run(db: impl Executor<'_, Database = Db>, job_id: &str) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as(sql!(
        "SELECT phase, cause, error_type, error_message FROM saga_runs WHERE job_id = $1"
    ))
    .bind(job_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn steps(db: impl Executor<'_, Database = Db>, job_id: &str) -> sqlx::Result<Vec<StepRow>> {
    sqlx::query_as(sql!(
        "SELECT step_index, name, outcome, attempts, started_at, finished_at, error_type,
                error_message, output, compensation, compensation_attempts,
                compensation_started_at, compensation_finished_at, compensation_error_type,
                compensation_error_message
         FROM saga_steps WHERE job_id = $1 ORDER BY step_index"
    ))
    .bind(job_id)
    .fetch_all(db)
    .await
}

/// Whether the job is a saga with steps to run or undo.
pub(crate) async fn unfinished(conn: &mut Conn, job_id: &str) -> sqlx::Result<bool> {
    let row = sqlx::query(sql!(
        "SELECT 1 FROM jobs WHERE job_id = $1
             AND EXISTS (SELECT 1 FROM saga_runs r
                         WHERE r.job_id = jobs.job_id AND r.phase IN ('forward', 'compensating'))"
    ))
    .bind(job_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// A `NULL` cause or error keeps the one stored: why a saga turned back
/// outlives the phases after.
pub(crate) async fn write_phase(
    conn: &mut Conn,
    write: &PhaseWrite<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO saga_runs (job_id, phase, cause, error_type, error_message, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (job_id) DO UPDATE SET phase = excluded.phase,
             cause = COALESCE(excluded.cause, saga_runs.cause),
             error_type = COALESCE(excluded.error_type, saga_runs.error_type),
             error_message = COALESCE(excluded.error_message, saga_runs.error_message),
             updated_at = excluded.updated_at"
    ))
    .bind(write.job_id)
    .bind(write.phase)
    .bind(write.cause)
    .bind(write.error_type)
    .bind(write.error_message)
    .bind(write.now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn begin_step(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    name: &str,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO saga_steps (job_id, step_index, name, outcome, attempts, started_at)
         VALUES ($1, $2, $3, 'running', 1, $4)
         ON CONFLICT (job_id, step_index) DO UPDATE SET outcome = 'running',
             attempts = saga_steps.attempts + 1"
    ))
    .bind(job_id)
    .bind(index)
    .bind(name)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn record_step(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    now: Millis,
    output: &JsonText,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET outcome = 'done', finished_at = $3, output = $4,
             error_type = NULL, error_message = NULL
         WHERE job_id = $1 AND step_index = $2"
    ))
    .bind(job_id)
    .bind(index)
    .bind(now)
    .bind(output)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn note_step_error(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    error: &StepError<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET outcome = $3, finished_at = $4, error_type = $5,
             error_message = $6, compensation = $7
         WHERE job_id = $1 AND step_index = $2"
    ))
    .bind(job_id)
    .bind(index)
    .bind(error.outcome)
    .bind(error.finished_at)
    .bind(error.error_type)
    .bind(error.error_message)
    .bind(error.compensation)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn compensate_done_steps(
    conn: &mut Conn,
    job_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET compensation = 'pending'
         WHERE job_id = $1 AND outcome = 'done' AND compensation = 'none'"
    ))
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn compensate_interrupted_steps(
    conn: &mut Conn,
    job_id: &str,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET outcome = 'failed', finished_at = $2, compensation = 'pending',
             error_type = 'interrupted',
             error_message = 'the attempt running it ended before it finished'
         WHERE job_id = $1 AND outcome = 'running'"
    ))
    .bind(job_id)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// The first try's start is kept.
pub(crate) async fn begin_compensation(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET compensation = 'running',
             compensation_attempts = compensation_attempts + 1,
             compensation_started_at = COALESCE(compensation_started_at, $3)
         WHERE job_id = $1 AND step_index = $2"
    ))
    .bind(job_id)
    .bind(index)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn record_compensation(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET compensation = 'done', compensation_finished_at = $3,
             compensation_error_type = NULL, compensation_error_message = NULL
         WHERE job_id = $1 AND step_index = $2"
    ))
    .bind(job_id)
    .bind(index)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn note_compensation_error(
    conn: &mut Conn,
    job_id: &str,
    index: i64,
    error_type: &str,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE saga_steps SET compensation_error_type = $3, compensation_error_message = $4
         WHERE job_id = $1 AND step_index = $2"
    ))
    .bind(job_id)
    .bind(index)
    .bind(error_type)
    .bind(message)
    .execute(conn)
    .await?;
    Ok(())
}
