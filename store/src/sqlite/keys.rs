//! API keys on SQLite.

use sqlx::{SqliteConnection, SqliteExecutor, types::Json};

use crate::{
    ValidKey,
    keys::{ApiKeyRow, KeyStateRow, NewKeyRow, StoredKeyRow},
    sql::Millis,
};

pub(crate) async fn insert(conn: &mut SqliteConnection, row: &NewKeyRow<'_>) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO api_keys (key_hash, key_id, tenant_id, key_prefix, created_at)
         VALUES ($1, $2, $3, $4, $5)"
    ))
    .bind(&row.key_hash)
    .bind(&row.key_id)
    .bind(row.tenant_id)
    .bind(&row.key_prefix)
    .bind(row.created_at)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn bump_generation(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_key_generation SET generation = generation + 1"
    ))
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn stored(conn: &mut SqliteConnection) -> sqlx::Result<Vec<StoredKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id, revoked_at, revoked_reason FROM api_keys"
    ))
    .fetch_all(conn)
    .await
}

/// Makes a key revoked for being left out of `API_KEYS` valid again, for
/// this tenant.
pub(crate) async fn restore(
    conn: &mut SqliteConnection,
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
    conn: &mut SqliteConnection,
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
    conn: &mut SqliteConnection,
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

/// The key's owner and revocation.
pub(crate) async fn state(
    conn: &mut SqliteConnection,
    key_id: &str,
) -> sqlx::Result<Option<KeyStateRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, revoked_at FROM api_keys WHERE key_id = $1"
    ))
    .bind(key_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn set_reason(
    conn: &mut SqliteConnection,
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

pub(crate) async fn list(db: impl SqliteExecutor<'_>) -> sqlx::Result<Vec<ApiKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, tenant_id, key_prefix, created_at, last_used_at, revoked_at,
                revoked_reason
         FROM api_keys ORDER BY created_at, key_id"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn generation(db: impl SqliteExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT generation FROM api_key_generation"))
        .fetch_one(db)
        .await
}

pub(crate) async fn valid(db: impl SqliteExecutor<'_>) -> sqlx::Result<Vec<ValidKey>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id FROM api_keys WHERE revoked_at IS NULL"
    ))
    .fetch_all(db)
    .await
}

/// Each key's latest use, unless a later one is stored. `uses` is bound
/// as one JSON array of `[key_id, used_at]` pairs.
pub(crate) async fn record_uses(
    db: impl SqliteExecutor<'_>,
    uses: &[(String, i64)],
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_keys SET last_used_at = u.used_at
         FROM (SELECT json_extract(value, '$[0]') AS key_id,
                      MAX(json_extract(value, '$[1]')) AS used_at
               FROM json_each($1) GROUP BY 1) AS u
         WHERE api_keys.key_id = u.key_id
           AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < u.used_at)"
    ))
    .bind(Json(uses))
    .execute(db)
    .await?;
    Ok(())
}

pub(crate) async fn count(db: impl SqliteExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM api_keys"))
        .fetch_one(db)
        .await
}
