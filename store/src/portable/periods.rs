//! Months and the filing endpoint, the statements written once for both
//! databases (see `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::periods::{EndpointRow, PeriodRow},
    rows::secrets::SealedSecret,
    sql::Millis,
};

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    month: &str,
) -> sqlx::Result<Option<PeriodRow>> {
    sqlx::query_as(sql!(
        "SELECT month, state, job_id, locked_at, closed_at, filing_reference
         FROM periods WHERE tenant_id = $1 AND month = $2"
    ))
    .bind(tenant_id)
    .bind(month)
    .fetch_optional(db)
    .await
}

pub(crate) async fn insert_locked(
    conn: &mut Conn,
    tenant_id: &str,
    month: &str,
    job_id: &str,
    now: Millis,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO periods (tenant_id, month, state, job_id, locked_at)
         VALUES ($1, $2, 'locked', $3, $4)"
    ))
    .bind(tenant_id)
    .bind(month)
    .bind(job_id)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn unlock(
    conn: &mut Conn,
    tenant_id: &str,
    month: &str,
    job_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM periods
         WHERE tenant_id = $1 AND month = $2 AND job_id = $3 AND state = 'locked'"
    ))
    .bind(tenant_id)
    .bind(month)
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn close(
    conn: &mut Conn,
    tenant_id: &str,
    month: &str,
    job_id: &str,
    now: Millis,
    reference: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE periods SET state = 'closed', closed_at = $4, filing_reference = $5
         WHERE tenant_id = $1 AND month = $2 AND job_id = $3"
    ))
    .bind(tenant_id)
    .bind(month)
    .bind(job_id)
    .bind(now)
    .bind(reference)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn lock_again(
    conn: &mut Conn,
    tenant_id: &str,
    month: &str,
    job_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE periods SET state = 'locked', closed_at = NULL, filing_reference = NULL
         WHERE tenant_id = $1 AND month = $2 AND job_id = $3"
    ))
    .bind(tenant_id)
    .bind(month)
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn delete(
    conn: &mut Conn,
    tenant_id: &str,
    month: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM periods WHERE tenant_id = $1 AND month = $2"
    ))
    .bind(tenant_id)
    .bind(month)
    .execute(conn)
    .await?;
    Ok(())
}

/// `secret` is stored only by the insert: a moved endpoint keeps its own.
pub(crate) async fn put_endpoint(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    url: &str,
    secret: &SealedSecret<'_>,
    now: Millis,
) -> sqlx::Result<EndpointRow> {
    sqlx::query_as(sql!(
        "INSERT INTO filing_endpoints (tenant_id, url, secret, sealed_secret, secret_key_id,
                                       created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6)
         ON CONFLICT (tenant_id) DO UPDATE SET url = excluded.url,
             updated_at = excluded.updated_at
         RETURNING url, secret, sealed_secret, secret_key_id, created_at, updated_at"
    ))
    .bind(tenant_id)
    .bind(url)
    .bind(secret.cleared)
    .bind(&secret.sealed_secret)
    .bind(&secret.secret_key_id)
    .bind(now)
    .fetch_one(db)
    .await
}

pub(crate) async fn get_endpoint(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
) -> sqlx::Result<Option<EndpointRow>> {
    sqlx::query_as(sql!(
        "SELECT url, secret, sealed_secret, secret_key_id, created_at, updated_at
         FROM filing_endpoints WHERE tenant_id = $1"
    ))
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}
