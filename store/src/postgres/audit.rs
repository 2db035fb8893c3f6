//! The audit log on Postgres.

use sqlx::PgExecutor;

use crate::rows::audit::{AuditQuery, AuditRow};

pub(crate) use crate::portable::postgres::audit::*;

/// The tenant's entries and the deployment's, newest first; a filter
/// left out is a NULL of its type.
pub(crate) async fn list(
    db: impl PgExecutor<'_>,
    query: &AuditQuery<'_>,
) -> sqlx::Result<Vec<AuditRow>> {
    sqlx::query_as(sql!(
        "SELECT entry_id, tenant_id, at, actor, key_id, job_id, request_id, action, target,
                details
         FROM audit_log
         WHERE (tenant_id = $1 OR tenant_id IS NULL) AND entry_id < $2
           AND ($3::text IS NULL OR action = $3::text)
           AND ($4::timestamptz IS NULL OR at >= $4::timestamptz)
           AND ($5::timestamptz IS NULL OR at < $5::timestamptz)
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
