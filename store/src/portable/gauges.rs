//! The queue's gauges, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::Db;
use crate::{
    rows::gauges::{KindCountRow, TenantCountRow},
    sql::Millis,
};

/// QUEUED and RUNNING jobs per kind, from the folded counters plus the
/// deltas not yet folded, in one statement (one snapshot).
pub(crate) async fn counts_by_kind(db: impl Executor<'_, Database = Db>) -> sqlx::Result<Vec<KindCountRow>> {
    sqlx::query_as(sql!(
        "SELECT kind,
                CAST(SUM(CASE WHEN status = 'QUEUED' THEN n ELSE 0 END) AS BIGINT) AS queued,
                CAST(SUM(CASE WHEN status = 'RUNNING' THEN n ELSE 0 END) AS BIGINT) AS running
         FROM (
             SELECT kind, status, n FROM job_counts WHERE status IN ('QUEUED', 'RUNNING')
             UNION ALL
             SELECT kind, status, delta FROM job_count_deltas WHERE status IN ('QUEUED', 'RUNNING')
         ) AS c
         GROUP BY kind ORDER BY kind"
    ))
    .fetch_all(db)
    .await
}

/// The `limit` tenants with the most QUEUED jobs, with their RUNNING ones.
pub(crate) async fn busiest_tenants(
    db: impl Executor<'_, Database = Db>,
    limit: i64,
) -> sqlx::Result<Vec<TenantCountRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id,
                CAST(SUM(CASE WHEN status = 'QUEUED' THEN n ELSE 0 END) AS BIGINT) AS queued,
                CAST(SUM(CASE WHEN status = 'RUNNING' THEN n ELSE 0 END) AS BIGINT) AS running
         FROM (
             SELECT tenant_id, status, n FROM job_counts WHERE status IN ('QUEUED', 'RUNNING')
             UNION ALL
             SELECT tenant_id, status, delta FROM job_count_deltas
             WHERE status IN ('QUEUED', 'RUNNING')
         ) AS c
         GROUP BY tenant_id HAVING SUM(n) > 0
         ORDER BY queued DESC, tenant_id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The earliest due time of a QUEUED job of `kind` that is due by `now`:
/// the first entry of `jobs_queued_by_kind`.
pub(crate) async fn oldest_due_queued(
    db: impl Executor<'_, Database = Db>,
    kind: &str,
    now: Millis,
) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT MIN(run_after) FROM jobs
         WHERE kind = $1 AND status = 'QUEUED' AND run_after <= $2"
    ))
    .bind(kind)
    .bind(now)
    .fetch_one(db)
    .await
}
