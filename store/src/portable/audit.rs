//! The audit log, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::audit::{AuditQuery, AuditRow},
    sql::Millis,
};

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

/// The tenant's entries and the deployment's, newest first.
pub(crate) async fn list(
    db: impl Executor<'_, Database = Db>,
    query: &AuditQuery<'_>,
) -> sqlx::Result<Vec<AuditRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, tenant_id, at, actor, key_id, job_id, request_id, action, target,
                details
         FROM audit_log
         WHERE (tenant_id = $1 OR tenant_id IS NULL) AND entry_id < $2
           AND ($3 IS NULL OR action = $3)
           AND ($4 IS NULL OR at >= $4)
           AND ($5 IS NULL OR at < $5)
         ORDER BY entry_id DESC LIMIT $6"
    ))
    .bind(query.tenant_id)
    .bind(query.before)
    .bind(query.action)
    .bind(query.since)
    .bind(query.until)
    .bind(query.limit)
    .fetch_all(db)
    .await
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
