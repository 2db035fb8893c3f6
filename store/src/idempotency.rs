//! Idempotency keys. The key's row is inserted in the request's own
//! transaction, after its effect, together with the response: a key is
//! therefore never seen half done, and a concurrent request with the same
//! key waits on the primary key (Postgres: on the uncommitted row; SQLite:
//! on the write lock) and then finds the finished row to replay.

use sqlx::{Row, any::AnyRow};

use super::{Store, WriteTx};
use crate::Result;
use shared::time::now_ms;

/// A response as stored against a key, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// The headers that are part of the answer (`Location`, `Retry-After`,
    /// `Content-Type`).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What a key already holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLookup {
    /// Unknown or expired: the request runs.
    New,
    /// Finished with the same request: replay this.
    Replay(StoredResponse),
    /// Finished with a different request (method, path or body).
    Mismatch,
}

impl KeyLookup {
    /// The key-reuse rule, written once: a live key answers the request
    /// it was stored for (the same fingerprint) with its stored response,
    /// and no other request; a key with no live row is new.
    pub(super) fn of(live: Option<(&str, &StoredResponse)>, fingerprint: &str) -> Self {
        match live {
            None => KeyLookup::New,
            Some((stored, response)) if stored == fingerprint => {
                KeyLookup::Replay(response.clone())
            }
            Some(_) => KeyLookup::Mismatch,
        }
    }
}

/// The response stored in an `idempotency_keys` row.
pub(super) fn stored_response(row: &AnyRow) -> Result<StoredResponse> {
    let headers: String = row.try_get("response_headers")?;
    Ok(StoredResponse {
        status: u16::try_from(row.try_get::<i64, _>("response_status")?)
            .map_err(|e| crate::Error::Corrupt(format!("stored status: {e}")))?,
        headers: serde_json::from_str(&headers)
            .map_err(|e| crate::Error::Corrupt(format!("stored headers: {e}")))?,
        body: row.try_get("response_body")?,
    })
}

impl Store {
    /// Looks a key up inside the request's transaction. On Postgres the
    /// row is locked (`FOR SHARE` would not stop a concurrent insert, but
    /// the final insert's primary key does).
    pub async fn lookup_idempotency_key(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<KeyLookup> {
        let row = sqlx::query(
            "SELECT fingerprint, expires_at, response_status, response_headers, response_body
             FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2",
        )
        .bind(tenant_id)
        .bind(key)
        .fetch_optional(&mut **tx)
        .await?;
        let live = match row {
            Some(row) if row.try_get::<i64, _>("expires_at")? > now_ms() => Some((
                row.try_get::<String, _>("fingerprint")?,
                stored_response(&row)?,
            )),
            _ => None,
        };
        Ok(KeyLookup::of(
            live.as_ref()
                .map(|(stored, response)| (stored.as_str(), response)),
            fingerprint,
        ))
    }

    /// Records the key with its response, in the transaction that made the
    /// effect. Returns `false` when another request stored the key first
    /// (then this transaction must be rolled back and that answer replayed).
    pub async fn save_idempotency_key(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        key: &str,
        fingerprint: &str,
        ttl_ms: i64,
        response: &StoredResponse,
    ) -> Result<bool> {
        let now = now_ms();
        let headers = serde_json::to_string(&response.headers)
            .map_err(|e| crate::Error::Corrupt(format!("headers: {e}")))?;
        // An expired row is taken over in place; a live one is left alone.
        let saved = sqlx::query(
            "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
                 response_status, response_headers, response_body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, created_at = excluded.created_at,
                 expires_at = excluded.expires_at, response_status = excluded.response_status,
                 response_headers = excluded.response_headers, response_body = excluded.response_body
             WHERE idempotency_keys.expires_at <= $4",
        )
        .bind(tenant_id)
        .bind(key)
        .bind(fingerprint)
        .bind(now)
        .bind(now.saturating_add(ttl_ms))
        .bind(i64::from(response.status))
        .bind(headers)
        .bind(response.body.as_slice())
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Ok(saved == 1)
    }

    /// Deletes up to `limit` expired keys; returns how many.
    pub async fn delete_expired_idempotency_keys(&self, limit: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let deleted = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (tenant_id, idem_key) IN (
                 SELECT tenant_id, idem_key FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2)",
        )
        .bind(now_ms())
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(deleted)
    }
}
