//! The dashboard on SQLite: sessions, the job counters, webhook health.

use sqlx::{SqliteExecutor, types::Json};

use crate::{
    rows::dashboard::{CountRow, HealthRow, MinuteRow},
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::dashboard::*;

/// The counters, which SQLite's triggers keep in place. The deltas'
/// table stays empty here; it is read so that the counts mean what they
/// mean on Postgres.
pub(crate) async fn counts(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
) -> sqlx::Result<Vec<CountRow>> {
    sqlx::query_as(sql!(
        "SELECT kind, status, CAST(SUM(n) AS BIGINT) AS n FROM (
             SELECT kind, status, n FROM job_counts WHERE tenant_id = $1
             UNION ALL
             SELECT kind, status, delta FROM job_count_deltas WHERE tenant_id = $1
         ) AS c
         GROUP BY kind, status HAVING SUM(n) <> 0 ORDER BY kind"
    ))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}

/// When the oldest QUEUED job was submitted. Ids are time-ordered: the
/// smallest queued id is the oldest.
pub(crate) async fn oldest_queued(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT created_at FROM jobs WHERE tenant_id = $1 AND status = 'QUEUED'
         ORDER BY job_id LIMIT 1"
    ))
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

/// Final jobs per minute and status since `since`; a minute is stored as
/// its number since the epoch (`finished_at / 60000`) and read as its
/// start.
pub(crate) async fn minutes(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    since: Millis,
) -> sqlx::Result<Vec<MinuteRow>> {
    sqlx::query_as(sql!(
        "SELECT minute * 60000 AS start, status, CAST(SUM(n) AS BIGINT) AS n FROM (
             SELECT minute, status, n FROM job_minutes WHERE tenant_id = $1 AND minute >= $2
             UNION ALL
             SELECT minute, status, delta FROM job_count_deltas
             WHERE tenant_id = $1 AND minute >= $2
         ) AS m
         GROUP BY minute, status"
    ))
    .bind(tenant_id)
    .bind(since.0.div_euclid(60_000))
    .fetch_all(db)
    .await
}

pub(crate) async fn health(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    since: Millis,
    webhook_ids: &[String],
) -> sqlx::Result<Vec<HealthRow>> {
    sqlx::query_as(sql!(
        "SELECT d.webhook_id, COUNT(*) AS attempts,
                SUM(CASE WHEN d.response_status BETWEEN 200 AND 299 THEN 1 ELSE 0 END) AS ok
         FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
         WHERE w.tenant_id = $1 AND d.attempted_at >= $2
           AND d.webhook_id IN (SELECT value FROM json_each($3))
         GROUP BY d.webhook_id"
    ))
    .bind(tenant_id)
    .bind(since)
    .bind(Json(webhook_ids))
    .fetch_all(db)
    .await
}
