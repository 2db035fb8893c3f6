//! The dashboard on SQLite: sessions, the job counters, webhook health.

use sqlx::{SqliteConnection, SqliteExecutor, types::Json};

use crate::{
    dashboard::{CountRow, FailureRow, HealthRow, MinuteRow, NewSessionRow, SessionRow},
    sql::Millis,
};

pub(crate) async fn delete_expired_sessions(
    conn: &mut SqliteConnection,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM dashboard_sessions WHERE expires_at <= $1"
    ))
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn insert_session(
    conn: &mut SqliteConnection,
    row: &NewSessionRow<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO dashboard_sessions (session_hash, tenant_id, key_hash, csrf_token,
             created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6)"
    ))
    .bind(&row.session_hash)
    .bind(row.tenant_id)
    .bind(row.key_hash)
    .bind(row.csrf_token)
    .bind(row.created_at)
    .bind(row.expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn session(
    db: impl SqliteExecutor<'_>,
    session_hash: &str,
    now: Millis,
) -> sqlx::Result<Option<SessionRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, key_hash, csrf_token, expires_at FROM dashboard_sessions
         WHERE session_hash = $1 AND expires_at > $2"
    ))
    .bind(session_hash)
    .bind(now)
    .fetch_optional(db)
    .await
}

pub(crate) async fn delete_session(
    db: impl SqliteExecutor<'_>,
    session_hash: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM dashboard_sessions WHERE session_hash = $1"
    ))
    .bind(session_hash)
    .execute(db)
    .await?;
    Ok(())
}

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

/// Drops the minutes whose jobs are all gone (retention).
pub(crate) async fn delete_empty_minutes(db: impl SqliteExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM job_minutes WHERE n = 0"))
        .execute(db)
        .await?;
    Ok(())
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

/// The webhook's latest attempt that got no 2xx.
pub(crate) async fn last_failure(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<FailureRow>> {
    sqlx::query_as(sql!(
        "SELECT d.attempted_at, d.response_status, d.error
         FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
         WHERE d.webhook_id = $1 AND w.tenant_id = $2
           AND (d.response_status IS NULL OR d.response_status NOT BETWEEN 200 AND 299)
         ORDER BY d.delivery_id DESC LIMIT 1"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}
