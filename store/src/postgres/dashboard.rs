//! The dashboard on Postgres: sessions, the job counters, webhook health.

use sqlx::{Executor, PgConnection, PgExecutor, PgPool};

use crate::{
    rows::dashboard::{CountRow, HealthRow, MinuteRow},
    sql::Millis,
};

pub(crate) use crate::portable::postgres::dashboard::*;

/// The advisory lock a fold of the job counters holds (any fixed number
/// no other lock of the service uses).
const FOLD_LOCK: i64 = 0x6a6f_6263_6f75_6e74;

/// The folded counters plus the deltas not yet folded, in one statement
/// and so one snapshot.
pub(crate) async fn counts(
    db: impl PgExecutor<'_>,
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
/// smallest queued id is the oldest. The status is a literal: with a
/// parameter, the generic plan walks the primary key through every
/// finished job instead of using `jobs_by_tenant_status`.
pub(crate) async fn oldest_queued(
    db: impl PgExecutor<'_>,
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

/// Final jobs per minute (a `timestamptz`, the minute's start) and status
/// since `since`, from the per-minute counters plus the deltas not yet
/// folded: a row per minute and status at most.
pub(crate) async fn minutes(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    since: Millis,
) -> sqlx::Result<Vec<MinuteRow>> {
    sqlx::query_as(sql!(
        "SELECT minute AS start, status, CAST(SUM(n) AS BIGINT) AS n FROM (
             SELECT minute, status, n FROM job_minutes WHERE tenant_id = $1 AND minute >= $2
             UNION ALL
             SELECT minute, status, delta FROM job_count_deltas
             WHERE tenant_id = $1 AND minute >= $2
         ) AS m
         GROUP BY minute, status"
    ))
    .bind(tenant_id)
    .bind(since)
    .fetch_all(db)
    .await
}

/// The fold's turn, until the transaction ends; `false`: another process
/// is folding.
pub(crate) async fn try_lock_fold(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar(sql!("SELECT pg_try_advisory_xact_lock($1)"))
        .bind(FOLD_LOCK)
        .fetch_one(conn)
        .await
}

/// Moves the deltas into the counters; returns how many it moved. Only
/// deltas committed before the statement began are deleted and folded;
/// later ones wait for the next fold.
pub(crate) async fn fold(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "WITH d AS (
             DELETE FROM job_count_deltas RETURNING tenant_id, kind, status, minute, delta
         ), counted AS (
             INSERT INTO job_counts (tenant_id, kind, status, n)
             SELECT tenant_id, kind, status, SUM(delta) FROM d
             GROUP BY tenant_id, kind, status
             ON CONFLICT (tenant_id, kind, status)
             DO UPDATE SET n = job_counts.n + EXCLUDED.n
         ), minutes AS (
             INSERT INTO job_minutes (tenant_id, minute, status, n)
             SELECT tenant_id, minute, status, SUM(delta) FROM d WHERE minute IS NOT NULL
             GROUP BY tenant_id, minute, status
             ON CONFLICT (tenant_id, minute, status)
             DO UPDATE SET n = job_minutes.n + EXCLUDED.n
         )
         SELECT COUNT(*) FROM d"
    ))
    .fetch_one(conn)
    .await
}

/// A statement of the simple protocol (one exchange, nothing prepared):
/// `VACUUM` runs outside any transaction, also behind a pooler.
pub(crate) async fn vacuum_deltas(pool: &PgPool) -> sqlx::Result<()> {
    pool.execute(sql!("VACUUM job_count_deltas")).await?;
    Ok(())
}

pub(crate) async fn health(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    since: Millis,
    webhook_ids: &[String],
) -> sqlx::Result<Vec<HealthRow>> {
    sqlx::query_as(sql!(
        "SELECT d.webhook_id, COUNT(*) AS attempts,
                SUM(CASE WHEN d.response_status BETWEEN 200 AND 299 THEN 1 ELSE 0 END) AS ok
         FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
         WHERE w.tenant_id = $1 AND d.attempted_at >= $2 AND d.webhook_id = ANY ($3)
         GROUP BY d.webhook_id"
    ))
    .bind(tenant_id)
    .bind(since)
    .bind(webhook_ids)
    .fetch_all(db)
    .await
}
