//! Jobs read, listed, cancelled and retried, the statements written once
//! for both databases (see `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{rows::jobs::JobRow, sql::Millis};

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<Option<JobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                created_at, started_at, finished_at, run_after, error_type, error_message,
                cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
         FROM jobs WHERE job_id = $1 AND tenant_id = $2"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn get_unscoped(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
) -> sqlx::Result<Option<JobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                created_at, started_at, finished_at, run_after, error_type, error_message,
                cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
         FROM jobs WHERE job_id = $1"
    ))
    .bind(job_id)
    .fetch_optional(db)
    .await
}

/// A schedule's jobs, newest first (`jobs_schedule_fires` finds them).
pub(crate) async fn list_of_schedule(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    schedule_id: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<JobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                created_at, started_at, finished_at, run_after, error_type, error_message,
                cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
         FROM jobs WHERE schedule_id = $2 AND tenant_id = $1 AND job_id < $3
         ORDER BY job_id DESC LIMIT $4"
    ))
    .bind(tenant_id)
    .bind(schedule_id)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub(crate) async fn ask_to_stop(conn: &mut Conn, job_id: &str) -> sqlx::Result<JobRow> {
    sqlx::query_as(sql!(
        "UPDATE jobs SET cancel_requested = true WHERE job_id = $1
         RETURNING job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                   created_at, started_at, finished_at, run_after, error_type, error_message,
                   cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                   worker_id, error_details"
    ))
    .bind(job_id)
    .fetch_one(conn)
    .await
}

pub(crate) async fn cancel_queued(
    conn: &mut Conn,
    job_id: &str,
    now: Millis,
) -> sqlx::Result<JobRow> {
    sqlx::query_as(sql!(
        "UPDATE jobs SET status = 'CANCELLED', finished_at = $2 WHERE job_id = $1
         RETURNING job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                   created_at, started_at, finished_at, run_after, error_type, error_message,
                   cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                   worker_id, error_details"
    ))
    .bind(job_id)
    .bind(now)
    .fetch_one(conn)
    .await
}

pub(crate) async fn mark_retry_of(
    conn: &mut Conn,
    new_job_id: &str,
    job_id: &str,
) -> sqlx::Result<JobRow> {
    sqlx::query_as(sql!(
        "UPDATE jobs SET retry_of = $2 WHERE job_id = $1
         RETURNING job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                   created_at, started_at, finished_at, run_after, error_type, error_message,
                   cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                   worker_id, error_details"
    ))
    .bind(new_job_id)
    .bind(job_id)
    .fetch_one(conn)
    .await
}

pub(crate) async fn retries_of(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "SELECT job_id FROM jobs WHERE retry_of = $1 AND tenant_id = $2 ORDER BY job_id"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
