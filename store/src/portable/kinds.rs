//! Registered kinds, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{rows::kinds::KindRow, sql::Millis};

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    name: &str,
) -> sqlx::Result<Option<KindRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, name, about, params_schema, timeout_ms, max_attempts,
                result_media_types, max_running, priority, created_at, updated_at, deleted_at
         FROM registered_kinds WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(db)
    .await
}

/// The tenant's kinds, deleted ones included, by name.
pub(crate) async fn list(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
) -> sqlx::Result<Vec<KindRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, name, about, params_schema, timeout_ms, max_attempts,
                result_media_types, max_running, priority, created_at, updated_at, deleted_at
         FROM registered_kinds WHERE tenant_id = $1 ORDER BY name"
    ))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}

/// Writes the kind as given: a new one, a change, or one deleted and
/// registered again (`created_at` is then the new registration's).
pub(crate) async fn put(conn: &mut Conn, row: &KindRow) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO registered_kinds (tenant_id, name, about, params_schema, timeout_ms,
             max_attempts, result_media_types, max_running, priority, created_at, updated_at,
             deleted_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)
         ON CONFLICT (tenant_id, name) DO UPDATE SET about = excluded.about,
             params_schema = excluded.params_schema, timeout_ms = excluded.timeout_ms,
             max_attempts = excluded.max_attempts,
             result_media_types = excluded.result_media_types,
             max_running = excluded.max_running, priority = excluded.priority,
             created_at = excluded.created_at, updated_at = excluded.updated_at,
             deleted_at = NULL"
    ))
    .bind(&row.tenant_id)
    .bind(&row.name)
    .bind(&row.about)
    .bind(&row.params_schema)
    .bind(row.timeout_ms)
    .bind(row.max_attempts)
    .bind(&row.result_media_types)
    .bind(row.max_running)
    .bind(&row.priority)
    .bind(row.created_at)
    .bind(row.updated_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks the kind deleted; whether it was registered.
pub(crate) async fn delete(
    conn: &mut Conn,
    tenant_id: &str,
    name: &str,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE registered_kinds SET deleted_at = $3
         WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL"
    ))
    .bind(tenant_id)
    .bind(name)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The tenant's jobs of the kind that are queued or running.
pub(crate) async fn active_jobs(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    name: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT count(*) FROM jobs
         WHERE tenant_id = $1 AND kind = $2 AND status IN ('QUEUED', 'RUNNING') AND external"
    ))
    .bind(tenant_id)
    .bind(name)
    .fetch_one(db)
    .await
}
