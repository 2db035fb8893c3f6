//! Periods and filing endpoints on Postgres.

use sqlx::PgConnection;

use crate::rows::periods::PeriodRow;

pub(crate) use crate::portable::postgres::periods::*;

/// The month's lock `key`, exclusive, until the transaction ends.
pub(crate) async fn lock_month(conn: &mut PgConnection, key: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
    ))
    .bind(key)
    .execute(conn)
    .await?;
    Ok(())
}

/// The month's lock `key`, shared, until the transaction ends.
pub(crate) async fn lock_month_shared(conn: &mut PgConnection, key: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))"
    ))
    .bind(key)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn of_months(
    conn: &mut PgConnection,
    tenant_id: &str,
    months: &[String],
) -> sqlx::Result<Vec<PeriodRow>> {
    sqlx::query_as(sql!(
        "SELECT month, state, job_id, locked_at, closed_at, filing_reference
         FROM periods WHERE tenant_id = $1 AND month = ANY ($2)
         ORDER BY month"
    ))
    .bind(tenant_id)
    .bind(months)
    .fetch_all(conn)
    .await
}
