//! Jobs on Postgres: reads, lists, the cancel and the retry.

use sqlx::{PgConnection, PgExecutor};

use crate::{JobFilter, rows::jobs::JobRow};

pub(crate) use crate::portable::postgres::jobs::*;

/// The job, locked until the transaction ends.
pub(crate) async fn lock(
    conn: &mut PgConnection,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<Option<JobRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts, progress,
                created_at, started_at, finished_at, run_after, error_type, error_message,
                cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
         FROM jobs WHERE job_id = $1 AND tenant_id = $2 FOR UPDATE"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

/// One statement per combination of filters, so that each keeps a plan
/// for the index that serves it (`jobs_by_tenant_status`,
/// `jobs_by_tenant_kind`, `jobs_by_tenant`). The cursor defaults to an
/// id above every id.
pub(crate) async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    filter: &JobFilter,
) -> sqlx::Result<Vec<JobRow>> {
    let before = filter.before.as_deref().unwrap_or("~");
    let limit = filter.limit + 1;
    match (filter.status, filter.kind.as_deref()) {
        (None, None) => {
            sqlx::query_as(sql!(
                "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts,
                        progress, created_at, started_at, finished_at, run_after, error_type,
                        error_message, cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
                 FROM jobs WHERE tenant_id = $1 AND job_id < $2
                 ORDER BY job_id DESC LIMIT $3"
            ))
            .bind(tenant_id)
            .bind(before)
            .bind(limit)
            .fetch_all(db)
            .await
        }
        (Some(status), None) => {
            sqlx::query_as(sql!(
                "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts,
                        progress, created_at, started_at, finished_at, run_after, error_type,
                        error_message, cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
                 FROM jobs WHERE tenant_id = $1 AND job_id < $2 AND status = $4
                 ORDER BY job_id DESC LIMIT $3"
            ))
            .bind(tenant_id)
            .bind(before)
            .bind(limit)
            .bind(status.as_str())
            .fetch_all(db)
            .await
        }
        (None, Some(kind)) => {
            sqlx::query_as(sql!(
                "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts,
                        progress, created_at, started_at, finished_at, run_after, error_type,
                        error_message, cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
                 FROM jobs WHERE tenant_id = $1 AND job_id < $2 AND kind = $4
                 ORDER BY job_id DESC LIMIT $3"
            ))
            .bind(tenant_id)
            .bind(before)
            .bind(limit)
            .bind(kind)
            .fetch_all(db)
            .await
        }
        (Some(status), Some(kind)) => {
            sqlx::query_as(sql!(
                "SELECT job_id, tenant_id, kind, params, status, attempts, max_attempts,
                        progress, created_at, started_at, finished_at, run_after, error_type,
                        error_message, cancel_requested, handbacks, retry_of, schedule_id, priority, capped,
                worker_id, error_details
                 FROM jobs WHERE tenant_id = $1 AND job_id < $2 AND status = $4 AND kind = $5
                 ORDER BY job_id DESC LIMIT $3"
            ))
            .bind(tenant_id)
            .bind(before)
            .bind(limit)
            .bind(status.as_str())
            .bind(kind)
            .fetch_all(db)
            .await
        }
    }
}

/// Literal statuses: for a parameter Postgres's generic plan guesses 2 jobs
/// in 5 active and may scan the tenant's jobs; with literals it sees how
/// few are.
pub(crate) async fn count_active(db: impl PgExecutor<'_>, tenant_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM jobs WHERE tenant_id = $1 AND status IN ('QUEUED', 'RUNNING')"
    ))
    .bind(tenant_id)
    .fetch_one(db)
    .await
}
