//! The dashboard's sessions and counts, the statements written once for
//! both databases (see `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::dashboard::{FailureRow, NewSessionRow, SessionRow},
    sql::Millis,
};

pub(crate) async fn delete_expired_sessions(
    conn: &mut Conn,
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
    conn: &mut Conn,
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
    db: impl Executor<'_, Database = Db>,
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
    db: impl Executor<'_, Database = Db>,
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

/// Drops the minutes whose jobs are all gone (retention).
pub(crate) async fn delete_empty_minutes(db: impl Executor<'_, Database = Db>) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM job_minutes WHERE n = 0"))
        .execute(db)
        .await?;
    Ok(())
}

/// The webhook's latest attempt that got no 2xx.
pub(crate) async fn last_failure(
    db: impl Executor<'_, Database = Db>,
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
