//! Idempotency keys on Postgres.

use sqlx::{PgConnection, PgExecutor};

use crate::{
    rows::idempotency::{KeyRow, KeyWrite},
    sql::{JsonText, Millis},
};

pub(crate) use crate::portable::postgres::idempotency::*;

/// The stored keys among (tenant, key) pairs, each found by its primary
/// key.
pub(crate) async fn get_many(
    db: impl PgExecutor<'_>,
    tenants: &[&str],
    keys: &[&str],
) -> sqlx::Result<Vec<KeyRow>> {
    sqlx::query_as(sql!(
        "SELECT k.tenant_id, k.idem_key, k.fingerprint, k.expires_at, k.response_status,
                k.response_headers, k.response_body
         FROM UNNEST($1::text[], $2::text[]) AS wanted (tenant_id, idem_key)
         JOIN idempotency_keys k
           ON k.tenant_id = wanted.tenant_id AND k.idem_key = wanted.idem_key"
    ))
    .bind(tenants)
    .bind(keys)
    .fetch_all(db)
    .await
}

/// A new key is inserted, an expired one taken over in place, a live one
/// left alone; in the order given, so two writers that share keys lock
/// them in one order. Returns the keys written. (The group commit's one
/// statement, `submit::submit_in_one_statement`, holds the same rule.)
pub(crate) async fn upsert_keys(
    conn: &mut PgConnection,
    keys: &[KeyWrite<'_>],
    now: Millis,
) -> sqlx::Result<Vec<(String, String)>> {
    sqlx::query_as(sql!(
        "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
             response_status, response_headers, response_body)
         SELECT tenant_id, idem_key, fingerprint, $1, expires_at, response_status,
                response_headers, response_body
         FROM UNNEST($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[],
                     $7::jsonb[], $8::bytea[]) WITH ORDINALITY
             AS k (tenant_id, idem_key, fingerprint, expires_at, response_status,
                   response_headers, response_body, n)
         ORDER BY n
         ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
             fingerprint = excluded.fingerprint, created_at = excluded.created_at,
             expires_at = excluded.expires_at, response_status = excluded.response_status,
             response_headers = excluded.response_headers, response_body = excluded.response_body
         WHERE idempotency_keys.expires_at <= excluded.created_at
         RETURNING tenant_id, idem_key"
    ))
    .bind(now)
    .bind(keys.iter().map(|k| k.tenant_id).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.key).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.fingerprint).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.expires_at).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.status).collect::<Vec<_>>())
    .bind(
        keys.iter()
            .map(|k| JsonText(k.headers.clone()))
            .collect::<Vec<_>>(),
    )
    .bind(keys.iter().map(|k| k.body).collect::<Vec<_>>())
    .fetch_all(conn)
    .await
}

pub(crate) async fn delete_expired(
    db: impl PgExecutor<'_>,
    now: Millis,
    limit: i64,
) -> sqlx::Result<u64> {
    let deleted = sqlx::query(sql!(
        "DELETE FROM idempotency_keys WHERE (tenant_id, idem_key) IN (
             SELECT tenant_id, idem_key FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2)"
    ))
    .bind(now)
    .bind(limit)
    .execute(db)
    .await?;
    Ok(deleted.rows_affected())
}
