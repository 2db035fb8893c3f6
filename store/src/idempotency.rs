//! Idempotency keys. The key's row is inserted in the request's own
//! transaction, after its effect, together with the response: a key is
//! therefore never seen half done, and a concurrent request with the same
//! key waits on the primary key (Postgres: on the uncommitted row; SQLite:
//! on the write lock) and then finds the finished row to replay.

use shared::time::now_ms;

use crate::{Error, Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::idempotency::{KeyRow, KeyWrite};

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
    pub(crate) fn of(live: Option<(&str, &StoredResponse)>, fingerprint: &str) -> Self {
        match live {
            None => KeyLookup::New,
            Some((stored, response)) if stored == fingerprint => {
                KeyLookup::Replay(response.clone())
            }
            Some(_) => KeyLookup::Mismatch,
        }
    }
}

impl KeyRow {
    /// The response stored with the key.
    pub(crate) fn response(&self) -> Result<StoredResponse> {
        Ok(StoredResponse {
            status: u16::try_from(self.response_status)
                .map_err(|e| Error::Corrupt(format!("stored status: {e}")))?,
            headers: serde_json::from_str(&self.response_headers.0)
                .map_err(|e| Error::Corrupt(format!("stored headers: {e}")))?,
            body: self.response_body.clone(),
        })
    }
}

impl StoredResponse {
    /// The headers as stored: a JSON array of `[name, value]` pairs.
    pub(crate) fn headers_json(&self) -> Result<String> {
        serde_json::to_string(&self.headers).map_err(|e| Error::Corrupt(format!("headers: {e}")))
    }
}

/// Writes the keys with their answers, in the order given: a new key is
/// inserted, an expired one taken over in place, a live one left alone.
/// Returns the keys written, as (tenant, key). The one upsert of keys:
/// a single request's key and a group commit's keys alike.
pub(crate) async fn upsert_keys(
    tx: &mut WriteTx,
    keys: &[KeyWrite<'_>],
    now: Millis,
) -> Result<Vec<(String, String)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    Ok(on_tx!(tx,
        conn => postgres::idempotency::upsert_keys(conn, keys, now).await?,
        conn => sqlite::idempotency::upsert_keys(conn, keys, now).await?,
    ))
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
        let row = on_tx!(tx,
            conn => postgres::idempotency::get(conn, tenant_id, key).await?,
            conn => sqlite::idempotency::get(conn, tenant_id, key).await?,
        );
        let live = match row {
            Some(row) if row.expires_at.0 > now_ms() => {
                Some((row.fingerprint.clone(), row.response()?))
            }
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
        let write = KeyWrite {
            tenant_id,
            key,
            fingerprint,
            expires_at: Millis(now.saturating_add(ttl_ms)),
            status: i64::from(response.status),
            headers: response.headers_json()?,
            body: &response.body,
        };
        let written = upsert_keys(tx, std::slice::from_ref(&write), Millis(now)).await?;
        Ok(!written.is_empty())
    }

    /// Deletes up to `limit` expired keys; returns how many.
    pub async fn delete_expired_idempotency_keys(&self, limit: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let now = Millis(now_ms());
        Ok(on_pool!(self,
            pool => postgres::idempotency::delete_expired(pool, now, limit).await?,
            pool => sqlite::idempotency::delete_expired(pool, now, limit).await?,
        ))
    }
}
