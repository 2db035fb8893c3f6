//! Attempts: leases, heartbeats, progress, lapsed leases, the statements
//! written once for both databases (see `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::attempts::{AttemptEnd, ClaimRow},
    sql::{JsonText, Millis},
};

pub(crate) async fn held_by(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
    worker_id: &str,
) -> sqlx::Result<Option<ClaimRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent
         FROM jobs WHERE job_id = $1 AND status = 'RUNNING' AND worker_id = $2"
    ))
    .bind(job_id)
    .bind(worker_id)
    .fetch_optional(db)
    .await
}

/// Every attempt `worker_id` holds: claims whose commit went through
/// although the worker never learnt of them.
pub(crate) async fn all_held_by(
    db: impl Executor<'_, Database = Db>,
    worker_id: &str,
) -> sqlx::Result<Vec<ClaimRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                traceparent
         FROM jobs WHERE worker_id = $1 AND status = 'RUNNING'"
    ))
    .bind(worker_id)
    .fetch_all(db)
    .await
}

/// Whether any job is claimable and due (see `Store::claim_due`); an
/// external job is not: workers over HTTP lease it.
pub(crate) async fn any_due(
    db: impl Executor<'_, Database = Db>,
    now: Millis,
    rank_before: Millis,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(sql!(
        "SELECT EXISTS (SELECT 1 FROM jobs
                        WHERE status = 'QUEUED' AND capped IS NULL AND NOT external
                          AND run_after <= $1 AND rank_at <= $2)"
    ))
    .bind(now)
    .bind(rank_before)
    .fetch_one(db)
    .await
}

pub(crate) async fn heartbeat(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
    attempt: i64,
    lease_until: Millis,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(sql!(
        "UPDATE jobs SET lease_expires_at = $3
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
         RETURNING cancel_requested"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(lease_until)
    .fetch_optional(db)
    .await
}

pub(crate) async fn set_progress(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
    attempt: i64,
    progress: f64,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(sql!(
        "UPDATE jobs SET progress = $3
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
         RETURNING cancel_requested"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(progress)
    .fetch_optional(db)
    .await
}

/// Ends the running attempt without a result; whether it applied. A
/// cancel asked stays asked on a job queued again (its next attempt
/// stops at once).
pub(crate) async fn end(
    conn: &mut Conn,
    job_id: &str,
    attempt: i64,
    end: &AttemptEnd<'_>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = $3, finished_at = $4, run_after = COALESCE($5, run_after),
             rank_at = COALESCE($5, run_after) + (rank_at - run_after),
             error_type = $6, error_message = $7, error_details = $9, lease_expires_at = NULL,
             worker_id = NULL,
             cancel_requested = CASE WHEN $3 = 'QUEUED' THEN cancel_requested ELSE false END,
             handbacks = handbacks + $8
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(end.status.as_str())
    .bind(end.finished_at)
    .bind(end.run_after)
    .bind(end.error.map(|e| e.error_type.as_str()))
    .bind(end.error.map(|e| e.message.as_str()))
    .bind(i64::from(end.handed_back))
    .bind(end.error.and_then(|e| e.details.as_ref()).map(|d| JsonText(d.to_string())))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn requeue_lapsed(
    conn: &mut Conn,
    job_id: &str,
    now: Millis,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET status = 'QUEUED', run_after = $2, lease_expires_at = NULL,
             worker_id = NULL, error_type = 'lease_expired', error_message = $3,
             error_details = NULL
         WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(now)
    .bind(message)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn fail_lapsed(
    conn: &mut Conn,
    job_id: &str,
    now: Millis,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET status = 'FAILED', finished_at = $2, lease_expires_at = NULL,
             worker_id = NULL, error_type = 'lease_expired', error_message = $3,
             error_details = NULL, cancel_requested = false
         WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(now)
    .bind(message)
    .execute(conn)
    .await?;
    Ok(())
}

/// Hands back an attempt whose lease a worker over HTTP never took up.
pub(crate) async fn hand_back_untaken(
    conn: &mut Conn,
    job_id: &str,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET status = 'QUEUED', run_after = $2, lease_expires_at = NULL,
             worker_id = NULL, handbacks = handbacks + 1, lease_taken_up = NULL,
             error_type = 'lease_not_taken_up', error_details = NULL,
             error_message = 'the lease was never taken up: no heartbeat or report came'
         WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Hands a running attempt back to the queue; whether it applied.
pub(crate) async fn hand_back(
    conn: &mut Conn,
    job_id: &str,
    attempt: i64,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = 'QUEUED', run_after = $3, lease_expires_at = NULL,
             worker_id = NULL, handbacks = handbacks + 1, error_type = 'shutdown',
             error_details = NULL,
             error_message = 'the worker shut down before the attempt finished'
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
