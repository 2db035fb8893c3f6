//! API keys on Postgres.

use sqlx::{PgConnection, PgExecutor};

use crate::{
    ValidKey,
    keys::{ApiKeyRow, KeyStateRow, NewKeyRow, StoredKeyRow},
    sql::Millis,
};

pub(crate) async fn insert(conn: &mut PgConnection, row: &NewKeyRow<'_>) -> sqlx::Result<()> {
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

pub(crate) async fn bump_generation(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_key_generation SET generation = generation + 1"
    ))
    .execute(conn)
    .await?;
    Ok(())
}

/// The generation's row, locked until the transaction ends: the turn of a
/// change to the set of keys.
pub(crate) async fn lock_generation(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(sql!("SELECT generation FROM api_key_generation FOR UPDATE"))
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) async fn stored(conn: &mut PgConnection) -> sqlx::Result<Vec<StoredKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id, revoked_at, revoked_reason FROM api_keys"
    ))
    .fetch_all(conn)
    .await
}

/// Makes a key revoked for being left out of `API_KEYS` valid again, for
/// this tenant.
pub(crate) async fn restore(
    conn: &mut PgConnection,
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
    conn: &mut PgConnection,
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
    conn: &mut PgConnection,
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

/// The key's owner and revocation, locked until the transaction ends.
pub(crate) async fn lock_state(
    conn: &mut PgConnection,
    key_id: &str,
) -> sqlx::Result<Option<KeyStateRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, revoked_at FROM api_keys WHERE key_id = $1 FOR UPDATE"
    ))
    .bind(key_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn set_reason(
    conn: &mut PgConnection,
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

pub(crate) async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<ApiKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, tenant_id, key_prefix, created_at, last_used_at, revoked_at,
                revoked_reason
         FROM api_keys ORDER BY created_at, key_id"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn generation(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT generation FROM api_key_generation"))
        .fetch_one(db)
        .await
}

pub(crate) async fn valid(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<ValidKey>> {
    sqlx::query_as(sql!(
        "SELECT key_hash, key_id, tenant_id FROM api_keys WHERE revoked_at IS NULL"
    ))
    .fetch_all(db)
    .await
}

/// Each key's latest use, unless a later one is stored.
pub(crate) async fn record_uses(
    db: impl PgExecutor<'_>,
    uses: &[(String, i64)],
) -> sqlx::Result<()> {
    let (key_ids, used_at): (Vec<&str>, Vec<Millis>) = uses
        .iter()
        .map(|(key_id, at)| (key_id.as_str(), Millis(*at)))
        .unzip();
    sqlx::query(sql!(
        "UPDATE api_keys AS k SET last_used_at = u.used_at
         FROM (SELECT key_id, MAX(used_at) AS used_at
               FROM UNNEST($1::text[], $2::timestamptz[]) AS u (key_id, used_at)
               GROUP BY key_id) AS u
         WHERE k.key_id = u.key_id AND (k.last_used_at IS NULL OR k.last_used_at < u.used_at)"
    ))
    .bind(key_ids)
    .bind(used_at)
    .execute(db)
    .await?;
    Ok(())
}

pub(crate) async fn count(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM api_keys"))
        .fetch_one(db)
        .await
}
