//! The worker protocol, the statements written once for both databases
//! (see `crate::portable`).

use sqlx::Executor;

use super::Db;
use crate::{
    rows::work::{AttemptStateRow, HeartbeatRow, WorkerRow},
    sql::Millis,
};

/// Extends the lease of the tenant's external attempt, never past its
/// deadline, and records its progress; `None` when the attempt is not
/// the job's current, running one, or its deadline has passed.
pub(crate) async fn heartbeat(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    now: Millis,
    lease_until: Millis,
    progress: Option<f64>,
) -> sqlx::Result<Option<HeartbeatRow>> {
    sqlx::query_as(sql!(
        "UPDATE jobs SET
             lease_expires_at = CASE WHEN attempt_deadline < $5 THEN attempt_deadline ELSE $5 END,
             progress = COALESCE($6, progress), lease_taken_up = true
         WHERE job_id = $1 AND tenant_id = $2 AND attempts = $3 AND status = 'RUNNING'
           AND external AND attempt_deadline > $4
         RETURNING cancel_requested, lease_expires_at, attempt_deadline"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .bind(attempt)
    .bind(now)
    .bind(lease_until)
    .bind(progress)
    .fetch_optional(db)
    .await
}

/// The tenant's external job's state (see [`AttemptStateRow`]).
pub(crate) async fn state(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<Option<AttemptStateRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, kind, status, attempts, handbacks, max_attempts, cancel_requested,
                run_after, attempt_deadline, error_type, error_message, worker_id
         FROM jobs WHERE job_id = $1 AND tenant_id = $2 AND external"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

/// Counts a failed attempt against the worker that held it.
pub(crate) async fn failed(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    name: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE workers SET failed = failed + 1 WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant_id)
    .bind(name)
    .execute(db)
    .await?;
    Ok(())
}

/// The tenant's workers, the last seen first, with the attempts each
/// holds now.
pub(crate) async fn list(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
) -> sqlx::Result<Vec<WorkerRow>> {
    sqlx::query_as(sql!(
        "SELECT w.name, w.kinds, w.first_seen_at, w.last_seen_at, w.leased, w.failed,
                (SELECT count(*) FROM jobs j
                 WHERE j.tenant_id = w.tenant_id AND j.status = 'RUNNING'
                   AND j.worker_id = 'http:' || w.name) AS holding
         FROM workers w WHERE w.tenant_id = $1
         ORDER BY w.last_seen_at DESC, w.name"
    ))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}
