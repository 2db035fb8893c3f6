//! Periods and filing endpoints on SQLite. No month lock: one writer at a
//! time already orders a period-close and the imports of its month.

use sqlx::SqliteConnection;

use crate::rows::periods::PeriodRow;

pub(crate) use crate::portable::sqlite::periods::*;

pub(crate) async fn of_months(
    conn: &mut SqliteConnection,
    tenant_id: &str,
    months: &[String],
) -> sqlx::Result<Vec<PeriodRow>> {
    sqlx::query_as(sql!(
        "SELECT month, state, job_id, locked_at, closed_at, filing_reference
         FROM periods WHERE tenant_id = $1 AND month IN (SELECT value FROM json_each($2))
         ORDER BY month"
    ))
    .bind(tenant_id)
    .bind(serde_json::to_string(months).map_err(|e| sqlx::Error::Encode(e.into()))?)
    .fetch_all(conn)
    .await
}
