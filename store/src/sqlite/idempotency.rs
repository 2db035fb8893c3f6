//! Idempotency keys on SQLite. A list of keys is one JSON array of rows;
//! a stored answer's bytes travel in it as hex.

use sqlx::{SqliteConnection, SqliteExecutor};

use crate::{
    rows::idempotency::{KeyRow, KeyWrite},
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::idempotency::*;

/// The stored keys among (tenant, key) pairs, each found by its primary
/// key.
pub(crate) async fn get_many(
    db: impl SqliteExecutor<'_>,
    pairs: &[(&str, &str)],
) -> sqlx::Result<Vec<KeyRow>> {
    let wanted = serde_json::to_string(pairs).expect("strings serialize");
    sqlx::query_as(sql!(
        "SELECT k.tenant_id, k.idem_key, k.fingerprint, k.expires_at, k.response_status,
                k.response_headers, k.response_body
         FROM json_each($1) AS wanted
         JOIN idempotency_keys k
           ON k.tenant_id = json_extract(wanted.value, '$[0]')
          AND k.idem_key = json_extract(wanted.value, '$[1]')"
    ))
    .bind(wanted)
    .fetch_all(db)
    .await
}

/// A new key is inserted, an expired one taken over in place, a live one
/// left alone. Returns the keys written.
pub(crate) async fn upsert_keys(
    conn: &mut SqliteConnection,
    keys: &[KeyWrite<'_>],
    now: Millis,
) -> sqlx::Result<Vec<(String, String)>> {
    let rows: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| {
            serde_json::json!([
                k.tenant_id,
                k.key,
                k.fingerprint,
                k.expires_at.0,
                k.status,
                k.headers,
                hex::encode(k.body)
            ])
        })
        .collect();
    // `WHERE true` tells SQLite's parser the ON CONFLICT belongs to the
    // insert, not to a join of the SELECT.
    sqlx::query_as(sql!(
        "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
             response_status, response_headers, response_body)
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), $1, json_extract(value, '$[3]'),
                json_extract(value, '$[4]'), json_extract(value, '$[5]'),
                unhex(json_extract(value, '$[6]'))
         FROM json_each($2) WHERE true
         ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
             fingerprint = excluded.fingerprint, created_at = excluded.created_at,
             expires_at = excluded.expires_at, response_status = excluded.response_status,
             response_headers = excluded.response_headers, response_body = excluded.response_body
         WHERE idempotency_keys.expires_at <= excluded.created_at
         RETURNING tenant_id, idem_key"
    ))
    .bind(now)
    .bind(serde_json::Value::Array(rows).to_string())
    .fetch_all(conn)
    .await
}

pub(crate) async fn delete_expired(
    db: impl SqliteExecutor<'_>,
    now: Millis,
    limit: i64,
) -> sqlx::Result<u64> {
    let deleted = sqlx::query(sql!(
        "DELETE FROM idempotency_keys WHERE rowid IN (
             SELECT rowid FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2)"
    ))
    .bind(now)
    .bind(limit)
    .execute(db)
    .await?;
    Ok(deleted.rows_affected())
}
