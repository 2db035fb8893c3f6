//! Secrets at rest, the statements written once for both databases (see
//! `crate::portable`): data keys, and secrets sealed anew in batches.

use sqlx::Executor;

use super::{Conn, Db};
use crate::rows::secrets::{DataKeyRow, NewDataKey, SealedSecret, SecretToSeal};

/// Stores a data key; nothing when it is stored already (each seal makes
/// sure of its key in its own transaction, so none refers to a key that
/// a rolled-back transaction made).
pub(crate) async fn insert_data_key(
    db: impl Executor<'_, Database = Db>,
    key: &NewDataKey<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO data_keys (key_id, master_fingerprint, wrapped_key, created_at)
         VALUES ($1, $2, $3, $4) ON CONFLICT (key_id) DO NOTHING"
    ))
    .bind(key.key_id)
    .bind(key.master_fingerprint)
    .bind(key.wrapped_key)
    .bind(key.created_at)
    .execute(db)
    .await?;
    Ok(())
}

/// Every data key, newest first.
pub(crate) async fn data_keys(
    db: impl Executor<'_, Database = Db>,
) -> sqlx::Result<Vec<DataKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, master_fingerprint, wrapped_key FROM data_keys
         ORDER BY created_at DESC, key_id DESC"
    ))
    .fetch_all(db)
    .await
}

pub(crate) async fn data_key(
    db: impl Executor<'_, Database = Db>,
    key_id: &str,
) -> sqlx::Result<Option<DataKeyRow>> {
    sqlx::query_as(sql!(
        "SELECT key_id, master_fingerprint, wrapped_key FROM data_keys WHERE key_id = $1"
    ))
    .bind(key_id)
    .fetch_optional(db)
    .await
}

/// Up to `limit` webhooks after `after` whose secret is in clear, or, with
/// `all`, sealed under another master key than `primary`'s.
pub(crate) async fn webhooks_to_seal(
    conn: &mut Conn,
    after: &str,
    primary: &str,
    all: bool,
    limit: i64,
) -> sqlx::Result<Vec<SecretToSeal>> {
    sqlx::query_as(sql!(
        "SELECT w.webhook_id AS row_key, w.secret, w.sealed_secret, w.secret_key_id
         FROM webhooks w LEFT JOIN data_keys d ON d.key_id = w.secret_key_id
         WHERE w.webhook_id > $1
           AND (w.sealed_secret IS NULL OR ($3 AND d.master_fingerprint <> $2))
         ORDER BY w.webhook_id LIMIT $4"
    ))
    .bind(after)
    .bind(primary)
    .bind(all)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Filing endpoints, as [`webhooks_to_seal`], by tenant.
pub(crate) async fn filing_endpoints_to_seal(
    conn: &mut Conn,
    after: &str,
    primary: &str,
    all: bool,
    limit: i64,
) -> sqlx::Result<Vec<SecretToSeal>> {
    sqlx::query_as(sql!(
        "SELECT f.tenant_id AS row_key, f.secret, f.sealed_secret, f.secret_key_id
         FROM filing_endpoints f LEFT JOIN data_keys d ON d.key_id = f.secret_key_id
         WHERE f.tenant_id > $1
           AND (f.sealed_secret IS NULL OR ($3 AND d.master_fingerprint <> $2))
         ORDER BY f.tenant_id LIMIT $4"
    ))
    .bind(after)
    .bind(primary)
    .bind(all)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Stores a webhook's secret sealed anew, unless it changed since `was`
/// (its sealed text, or its clear secret) was read; returns the rows
/// changed.
pub(crate) async fn reseal_webhook(
    conn: &mut Conn,
    webhook_id: &str,
    was: &str,
    sealed: &SealedSecret<'_>,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "UPDATE webhooks SET sealed_secret = $3, secret_key_id = $4, secret = $5
         WHERE webhook_id = $1 AND COALESCE(sealed_secret, secret) = $2"
    ))
    .bind(webhook_id)
    .bind(was)
    .bind(&sealed.sealed_secret)
    .bind(&sealed.secret_key_id)
    .bind(sealed.cleared)
    .execute(conn)
    .await?
    .rows_affected())
}

/// [`reseal_webhook`] for a tenant's filing endpoint.
pub(crate) async fn reseal_filing_endpoint(
    conn: &mut Conn,
    tenant_id: &str,
    was: &str,
    sealed: &SealedSecret<'_>,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "UPDATE filing_endpoints SET sealed_secret = $3, secret_key_id = $4, secret = $5
         WHERE tenant_id = $1 AND COALESCE(sealed_secret, secret) = $2"
    ))
    .bind(tenant_id)
    .bind(was)
    .bind(&sealed.sealed_secret)
    .bind(&sealed.secret_key_id)
    .bind(sealed.cleared)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Deletes the data keys of master keys other than `primary`'s that no
/// secret uses any more; returns how many.
pub(crate) async fn retire_data_keys(conn: &mut Conn, primary: &str) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "DELETE FROM data_keys WHERE master_fingerprint <> $1
           AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.secret_key_id = data_keys.key_id)
           AND NOT EXISTS (SELECT 1 FROM filing_endpoints f
                           WHERE f.secret_key_id = data_keys.key_id)"
    ))
    .bind(primary)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Data keys of master keys other than `primary`'s.
pub(crate) async fn count_other_data_keys(
    db: impl Executor<'_, Database = Db>,
    primary: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM data_keys WHERE master_fingerprint <> $1"
    ))
    .bind(primary)
    .fetch_one(db)
    .await
}
