//! Jobs on SQLite: reads, lists, the cancel and the retry.

use sqlx::SqliteExecutor;

use crate::{JobFilter, rows::jobs::JobRow};

pub(crate) use crate::portable::sqlite::jobs::*;

/// One statement per combination of filters, each served by its index
/// (`jobs_by_tenant_status`, `jobs_by_tenant_kind`, `jobs_by_tenant`).
/// The cursor defaults to an id above every id.
pub(crate) async fn list(
    db: impl SqliteExecutor<'_>,
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

pub(crate) async fn count_active(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM jobs WHERE tenant_id = $1 AND status IN ('QUEUED', 'RUNNING')"
    ))
    .bind(tenant_id)
    .fetch_one(db)
    .await
}
