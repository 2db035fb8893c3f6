//! API keys, stored as SHA-256 hashes: a key is a random 256-bit secret, so
//! a fast hash is enough and lets every request be checked cheaply.
//!
//! Every change to which keys are valid bumps `api_key_generation` in the
//! same transaction, so an api process learns of it by reading one row
//! (see `api/src/auth.rs`).

use std::collections::HashMap;

use shared::ids::{new_api_key, new_api_key_id, sha256_hex};
use sqlx::{Row, any::AnyRow};

use super::{Store, WriteTx, built};
use crate::{Error, Result};
use shared::time::now_ms;

/// Runs for every request, good key or bad: one hash, one allocation.
pub fn hash_key(key: &str) -> String {
    sha256_hex(key.as_bytes())
}

/// What a person is shown of a key to recognise it: `rk_` and four hex
/// digits of a key this service made (16 of its 256 random bits), or the
/// first four characters of one from `API_KEYS` (at least 16 long).
fn visible_prefix(key: &str) -> String {
    let shown = if key.starts_with("rk_") { 7 } else { 4 };
    key.chars().take(shown).collect()
}

/// A key that opens the API, as every api process holds it in memory.
#[derive(Debug, Clone)]
pub struct ValidKey {
    pub key_hash: String,
    pub key_id: String,
    pub tenant_id: String,
}

/// Why a key was revoked, which decides whether it can come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// `api keys revoke`: for good. A start whose `API_KEYS` still lists
    /// the key is refused.
    Command,
    /// Left out of `API_KEYS` at a start: valid again if a later start
    /// lists it (a configuration rolled back).
    NotInApiKeys,
}

impl Revocation {
    fn as_str(self) -> &'static str {
        match self {
            Revocation::Command => "command",
            Revocation::NotInApiKeys => "api_keys",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "api_keys" => Revocation::NotInApiKeys,
            _ => Revocation::Command,
        }
    }
}

/// A stored key as `api keys list` shows it: never the key, nor its hash.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub key_id: String,
    pub tenant_id: String,
    /// Unknown for keys stored before keys had a lifecycle.
    pub key_prefix: Option<String>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: Option<(i64, Revocation)>,
}

/// A key just made: the only time the key itself is known.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub key_id: String,
    pub key: String,
    pub key_prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeOutcome {
    Revoked {
        tenant_id: String,
    },
    /// Revoked before, at this time; it now stays revoked for good.
    AlreadyRevoked {
        revoked_at: i64,
    },
    UnknownKeyId,
}

/// What making the stored keys match `API_KEYS` changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeySync {
    pub added: usize,
    pub moved: usize,
    pub restored: usize,
    pub revoked: usize,
}

impl KeySync {
    fn changed(&self) -> bool {
        *self != KeySync::default()
    }
}

struct StoredKey {
    key_id: String,
    tenant_id: String,
    revoked: Option<Revocation>,
}

impl Store {
    /// Makes and stores a new key for the tenant.
    pub async fn create_api_key(&self, tenant_id: &str) -> Result<NewApiKey> {
        let key = new_api_key();
        let mut tx = self.begin_write().await?;
        let (key_id, key_prefix) = insert_key(&mut tx, tenant_id, &key).await?;
        bump_generation(&mut tx).await?;
        tx.commit().await?;
        Ok(NewApiKey {
            key_id,
            key,
            key_prefix,
        })
    }

    /// Makes the stored keys match `API_KEYS`, the complete list of valid
    /// keys: a listed key is added, moved to its listed tenant, or restored
    /// if a start without it revoked it; every other stored key is revoked.
    /// A listed key revoked by `api keys revoke` is an error: it stays
    /// revoked, and the configuration has to change.
    pub async fn sync_configured_api_keys(
        &self,
        configured: &[(String, String)],
    ) -> Result<KeySync> {
        let mut tx = self.begin_write().await?;
        // Starts of several processes take turns here (SQLite's BEGIN
        // IMMEDIATE already serialises them).
        sqlx::query(built(&format!(
            "SELECT generation FROM api_key_generation{}",
            self.dialect.for_update()
        )))
        .fetch_one(&mut *tx)
        .await?;
        let rows = sqlx::query(
            "SELECT key_hash, key_id, tenant_id, revoked_at, revoked_reason FROM api_keys",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut stored: HashMap<String, StoredKey> = HashMap::with_capacity(rows.len());
        for row in rows {
            let revoked_at: Option<i64> = row.try_get("revoked_at")?;
            let reason: Option<String> = row.try_get("revoked_reason")?;
            stored.insert(
                row.try_get("key_hash")?,
                StoredKey {
                    key_id: row.try_get("key_id")?,
                    tenant_id: row.try_get("tenant_id")?,
                    revoked: revoked_at.map(|_| Revocation::parse(reason.as_deref().unwrap_or(""))),
                },
            );
        }

        let mut sync = KeySync::default();
        let mut listed = std::collections::HashSet::new();
        for (tenant_id, key) in configured {
            let key_hash = hash_key(key);
            listed.insert(key_hash.clone());
            match stored.get(&key_hash) {
                None => {
                    insert_key(&mut tx, tenant_id, key).await?;
                    sync.added += 1;
                }
                Some(StoredKey {
                    key_id,
                    revoked: Some(Revocation::Command),
                    ..
                }) => {
                    return Err(Error::Config(format!(
                        "API_KEYS: the key of tenant {tenant_id:?} was revoked with `api keys \
                         revoke` (key id {key_id}) and stays revoked; take it out of API_KEYS"
                    )));
                }
                Some(StoredKey {
                    key_id,
                    revoked: Some(Revocation::NotInApiKeys),
                    ..
                }) => {
                    sqlx::query(
                        "UPDATE api_keys SET tenant_id = $1, revoked_at = NULL,
                                revoked_reason = NULL
                         WHERE key_id = $2",
                    )
                    .bind(tenant_id)
                    .bind(key_id)
                    .execute(&mut *tx)
                    .await?;
                    sync.restored += 1;
                }
                Some(StoredKey {
                    key_id,
                    tenant_id: stored_tenant,
                    revoked: None,
                }) if stored_tenant != tenant_id => {
                    sqlx::query("UPDATE api_keys SET tenant_id = $1 WHERE key_id = $2")
                        .bind(tenant_id)
                        .bind(key_id)
                        .execute(&mut *tx)
                        .await?;
                    sync.moved += 1;
                }
                Some(_) => {}
            }
        }
        let now = now_ms();
        for (key_hash, key) in &stored {
            if key.revoked.is_none() && !listed.contains(key_hash) {
                sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1, revoked_reason = $2 WHERE key_id = $3",
                )
                .bind(now)
                .bind(Revocation::NotInApiKeys.as_str())
                .bind(&key.key_id)
                .execute(&mut *tx)
                .await?;
                sync.revoked += 1;
            }
        }
        if sync.changed() {
            bump_generation(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(sync)
    }

    /// Revokes the key with this id. A key that a start without it in
    /// `API_KEYS` had revoked is now revoked for good.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<RevokeOutcome> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(built(&format!(
            "SELECT tenant_id, revoked_at FROM api_keys WHERE key_id = $1{}",
            self.dialect.for_update()
        )))
        .bind(key_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(RevokeOutcome::UnknownKeyId);
        };
        let tenant_id: String = row.try_get("tenant_id")?;
        let revoked_at: Option<i64> = row.try_get("revoked_at")?;
        let outcome = match revoked_at {
            Some(revoked_at) => {
                sqlx::query("UPDATE api_keys SET revoked_reason = $1 WHERE key_id = $2")
                    .bind(Revocation::Command.as_str())
                    .bind(key_id)
                    .execute(&mut *tx)
                    .await?;
                RevokeOutcome::AlreadyRevoked { revoked_at }
            }
            None => {
                sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1, revoked_reason = $2 WHERE key_id = $3",
                )
                .bind(now_ms())
                .bind(Revocation::Command.as_str())
                .bind(key_id)
                .execute(&mut *tx)
                .await?;
                bump_generation(&mut tx).await?;
                RevokeOutcome::Revoked { tenant_id }
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Every stored key, revoked ones included, oldest first.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let rows = sqlx::query(
            "SELECT key_id, tenant_id, key_prefix, created_at, last_used_at, revoked_at,
                    revoked_reason
             FROM api_keys ORDER BY created_at, key_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(api_key_record).collect()
    }

    /// The generation of the set of valid keys: it moves with every change.
    pub async fn api_key_generation(&self) -> Result<i64> {
        let row = sqlx::query("SELECT generation FROM api_key_generation")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("generation")?)
    }

    /// Every valid key, with the generation they are at least as new as
    /// (read first: a change in between only makes the next check reload).
    pub async fn valid_api_keys(&self) -> Result<(i64, Vec<ValidKey>)> {
        let generation = self.api_key_generation().await?;
        let rows = sqlx::query(
            "SELECT key_hash, key_id, tenant_id FROM api_keys WHERE revoked_at IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let keys = rows
            .iter()
            .map(|row| {
                Ok(ValidKey {
                    key_hash: row.try_get("key_hash")?,
                    key_id: row.try_get("key_id")?,
                    tenant_id: row.try_get("tenant_id")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((generation, keys))
    }

    /// Records when keys were last used, all in one transaction; a time
    /// older than the stored one (from a slower process) changes nothing.
    pub async fn record_api_key_uses(&self, uses: &[(String, i64)]) -> Result<()> {
        if uses.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for (key_id, used_at) in uses {
            sqlx::query(
                "UPDATE api_keys SET last_used_at = $1
                 WHERE key_id = $2 AND (last_used_at IS NULL OR last_used_at < $1)",
            )
            .bind(used_at)
            .bind(key_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Stored keys, revoked ones included.
    pub async fn count_api_keys(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM api_keys")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }
}

async fn insert_key(tx: &mut WriteTx, tenant_id: &str, key: &str) -> Result<(String, String)> {
    let key_id = new_api_key_id();
    let key_prefix = visible_prefix(key);
    sqlx::query(
        "INSERT INTO api_keys (key_hash, key_id, tenant_id, key_prefix, created_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(hash_key(key))
    .bind(&key_id)
    .bind(tenant_id)
    .bind(&key_prefix)
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    Ok((key_id, key_prefix))
}

async fn bump_generation(tx: &mut WriteTx) -> Result<()> {
    sqlx::query("UPDATE api_key_generation SET generation = generation + 1")
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn api_key_record(row: &AnyRow) -> Result<ApiKeyRecord> {
    let revoked_at: Option<i64> = row.try_get("revoked_at")?;
    let reason: Option<String> = row.try_get("revoked_reason")?;
    Ok(ApiKeyRecord {
        key_id: row.try_get("key_id")?,
        tenant_id: row.try_get("tenant_id")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked: revoked_at.map(|at| (at, Revocation::parse(reason.as_deref().unwrap_or("")))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_hashes_to_the_lowercase_hex_sha256_already_stored() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn made_keys_and_ids_have_their_documented_shape() {
        let key = new_api_key();
        assert!(key.starts_with("rk_") && key.len() == 67, "{key}");
        assert_eq!(visible_prefix(&key), key[..7]);
        assert_eq!(visible_prefix("configured-key-0001"), "conf");
        let key_id = new_api_key_id();
        assert!(key_id.starts_with("key_") && key_id.len() == 20, "{key_id}");
    }
}
