//! API keys, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    ValidKey,
    rows::keys::{ApiKeyRow, NewKeyRow, StoredKeyRow},
    sql::Millis,
};

pub(crate) async fn insert(conn: &mut Conn, row: &NewKeyRow<'_>) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO api_keys (key_hash, key_id, tenant_id, key_prefix, created_at, scopes, kinds)
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(&row.key_hash)
    .bind(&row.key_id)
    .bind(row.tenant_id)
    .bind(&row.key_prefix)
    .bind(row.created_at)
    .bind(&row.scopes)
    .bind(&row.kinds)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn bump_generation(conn: &mut Conn) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_key_generation SET generation = generation + 1"
    ))
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn stored(conn: &mut Conn) -> sqlx::Result<Vec<StoredKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id, revoked_at, revoked_reason, scopes FROM api_keys"
    ))
    .fetch_all(conn)
    .await
}

/// Makes a key revoked for being left out of `API_KEYS` valid again, for
/// this tenant.
pub(crate) async fn restore(
    conn: &mut Conn,
    key_id: &str,
    tenant_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_keys SET tenant_id = $1, revoked_at = NULL, revoked_reason = NULL
         WHERE key_id = $2"
    ))
    .bind(tenant_id)
    .bind(key_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn move_to(
    conn: &mut Conn,
    key_id: &str,
    tenant_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!("UPDATE api_keys SET tenant_id = $1 WHERE key_id = $2"))
        .bind(tenant_id)
        .bind(key_id)
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) async fn revoke(
    conn: &mut Conn,
    key_id: &str,
    at: Millis,
    reason: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_keys SET revoked_at = $1, revoked_reason = $2 WHERE key_id = $3"
    ))
    .bind(at)
    .bind(reason)
    .bind(key_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn set_reason(
    conn: &mut Conn,
    key_id: &str,
    reason: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_keys SET revoked_reason = $1 WHERE key_id = $2"
    ))
    .bind(reason)
    .bind(key_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn list(db: impl Executor<'_, Database = Db>) -> sqlx::Result<Vec<ApiKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, tenant_id, key_prefix, created_at, last_used_at, revoked_at,
                revoked_reason, scopes, kinds
         FROM api_keys ORDER BY created_at, key_id"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn list_of(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
) -> sqlx::Result<Vec<ApiKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, tenant_id, key_prefix, created_at, last_used_at, revoked_at,
                revoked_reason, scopes, kinds
         FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, key_id"
    ))
    .bind(tenant_id)
    .fetch_all(db)
    .await
}

pub(crate) async fn generation(db: impl Executor<'_, Database = Db>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT generation FROM api_key_generation"))
        .fetch_one(db)
        .await
}

pub(crate) async fn valid(db: impl Executor<'_, Database = Db>) -> sqlx::Result<Vec<ValidKey>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id, scopes, kinds FROM api_keys
         WHERE revoked_at IS NULL"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn count(db: impl Executor<'_, Database = Db>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM api_keys"))
        .fetch_one(db)
        .await
}
