//! The audit log, the statements written once for both databases (see
//! `crate::portable`).

use super::Conn;
use crate::{rows::audit::AuditRow, sql::Millis};

pub(crate) async fn insert(conn: &mut Conn, row: &AuditRow) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO audit_log (entry_id, tenant_id, at, actor, key_id, job_id, request_id,
                                action, target, details)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    ))
    .bind(&row.entry_id)
    .bind(&row.tenant_id)
    .bind(row.at)
    .bind(&row.actor)
    .bind(&row.key_id)
    .bind(&row.job_id)
    .bind(&row.request_id)
    .bind(&row.action)
    .bind(&row.target)
    .bind(&row.details)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes up to `limit` entries written before `before`.
pub(crate) async fn prune(
    conn: &mut Conn,
    before: Millis,
    limit: i64,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "DELETE FROM audit_log WHERE entry_id IN
           (SELECT entry_id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)"
    ))
    .bind(before)
    .bind(limit)
    .execute(conn)
    .await?
    .rows_affected())
}
