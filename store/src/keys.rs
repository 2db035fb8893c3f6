//! API keys, stored as SHA-256 hashes: a key is a random 256-bit secret, so
//! a fast hash is enough and lets every request be checked cheaply.
//!
//! Every change to which keys are valid bumps `api_key_generation` in the
//! same transaction, so an api process learns of it by reading one row
//! (see `api/src/api_keys.rs`).

use std::collections::{HashMap, HashSet};

use shared::{
    ids::{new_api_key, new_api_key_id, sha256_hex},
    time::now_ms,
};

use crate::{Error, Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::keys::{ApiKeyRow, NewKeyRow, StoredKeyRow};

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
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ValidKey {
    pub key_hash: String,
    pub key_id: String,
    pub tenant_id: String,
    /// See [`KeyScope`].
    pub scopes: Option<String>,
    pub kinds: Option<String>,
}

impl ValidKey {
    /// What the key may do; a stored scope this build does not know
    /// gives no rights at all.
    pub fn scope(&self) -> Option<KeyScope> {
        KeyScope::parse(self.scopes.as_deref(), self.kinds.as_deref())
    }
}

/// What a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyScope {
    /// Everything but leasing attempts: every key made without a scope
    /// (and every key of `API_KEYS`).
    Full,
    /// Lease and report the attempts of its tenant's registered kinds, of
    /// `kinds` only when it names some; nothing else.
    Work { kinds: Option<Vec<String>> },
}

impl KeyScope {
    fn parse(scopes: Option<&str>, kinds: Option<&str>) -> Option<Self> {
        match scopes {
            None => Some(KeyScope::Full),
            Some("work") => Some(KeyScope::Work {
                kinds: match kinds {
                    None => None,
                    Some(list) => Some(serde_json::from_str(list).ok()?),
                },
            }),
            Some(_) => None,
        }
    }

    /// The scope's name, as `api keys list` shows it.
    pub fn name(&self) -> &'static str {
        match self {
            KeyScope::Full => "full",
            KeyScope::Work { .. } => "work",
        }
    }

    fn columns(&self) -> (Option<&'static str>, Option<String>) {
        match self {
            KeyScope::Full => (None, None),
            KeyScope::Work { kinds } => (
                Some("work"),
                kinds
                    .as_ref()
                    .map(|kinds| serde_json::Value::from(kinds.clone()).to_string()),
            ),
        }
    }
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

    fn parse(text: Option<&str>) -> Self {
        match text {
            Some("api_keys") => Revocation::NotInApiKeys,
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
    /// `None`: a scope this build does not know.
    pub scope: Option<KeyScope>,
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

impl StoredKeyRow {
    fn revoked(&self) -> Option<Revocation> {
        self.revoked_at
            .map(|_| Revocation::parse(self.revoked_reason.as_deref()))
    }
}

impl From<ApiKeyRow> for ApiKeyRecord {
    fn from(row: ApiKeyRow) -> Self {
        ApiKeyRecord {
            key_id: row.key_id,
            tenant_id: row.tenant_id,
            key_prefix: row.key_prefix,
            created_at: row.created_at.into(),
            last_used_at: row.last_used_at.map(i64::from),
            revoked: row
                .revoked_at
                .map(|at| (at.into(), Revocation::parse(row.revoked_reason.as_deref()))),
            scope: KeyScope::parse(row.scopes.as_deref(), row.kinds.as_deref()),
        }
    }
}

impl Store {
    /// Makes and stores a new key of full rights for the tenant.
    pub async fn create_api_key(&self, tenant_id: &str) -> Result<NewApiKey> {
        self.create_scoped_api_key(tenant_id, &KeyScope::Full).await
    }

    /// Makes and stores a new key for the tenant, of this scope.
    pub async fn create_scoped_api_key(
        &self,
        tenant_id: &str,
        scope: &KeyScope,
    ) -> Result<NewApiKey> {
        let key = new_api_key();
        let mut tx = self.begin_write().await?;
        let (key_id, key_prefix) = insert_key(&mut tx, tenant_id, &key, scope).await?;
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
        let rows = on_tx!(tx,
            conn => {
                postgres::keys::lock_generation(&mut *conn).await?;
                postgres::keys::stored(conn).await?
            },
            conn => sqlite::keys::stored(conn).await?,
        );
        let stored: HashMap<String, StoredKeyRow> = rows
            .into_iter()
            .map(|row| (row.key_hash.clone(), row))
            .collect();

        let mut sync = KeySync::default();
        let mut listed = HashSet::new();
        for (tenant_id, key) in configured {
            let key_hash = hash_key(key);
            let Some(row) = stored.get(&key_hash) else {
                listed.insert(key_hash);
                insert_key(&mut tx, tenant_id, key, &KeyScope::Full).await?;
                sync.added += 1;
                continue;
            };
            listed.insert(key_hash);
            match row.revoked() {
                Some(Revocation::Command) => {
                    return Err(Error::Config(format!(
                        "API_KEYS: the key of tenant {tenant_id:?} was revoked with `api keys \
                         revoke` (key id {}) and stays revoked; take it out of API_KEYS",
                        row.key_id
                    )));
                }
                Some(Revocation::NotInApiKeys) => {
                    on_tx!(tx,
                        conn => postgres::keys::restore(conn, &row.key_id, tenant_id).await?,
                        conn => sqlite::keys::restore(conn, &row.key_id, tenant_id).await?,
                    );
                    sync.restored += 1;
                }
                None if row.tenant_id != *tenant_id => {
                    on_tx!(tx,
                        conn => postgres::keys::move_to(conn, &row.key_id, tenant_id).await?,
                        conn => sqlite::keys::move_to(conn, &row.key_id, tenant_id).await?,
                    );
                    sync.moved += 1;
                }
                None => {}
            }
        }
        let now = Millis(now_ms());
        let reason = Revocation::NotInApiKeys.as_str();
        for (key_hash, row) in &stored {
            if row.revoked_at.is_none() && !listed.contains(key_hash) {
                on_tx!(tx,
                    conn => postgres::keys::revoke(conn, &row.key_id, now, reason).await?,
                    conn => sqlite::keys::revoke(conn, &row.key_id, now, reason).await?,
                );
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
        let row = on_tx!(tx,
            conn => postgres::keys::lock_state(conn, key_id).await?,
            conn => sqlite::keys::state(conn, key_id).await?,
        );
        let Some(row) = row else {
            return Ok(RevokeOutcome::UnknownKeyId);
        };
        let command = Revocation::Command.as_str();
        let outcome = match row.revoked_at {
            Some(revoked_at) => {
                on_tx!(tx,
                    conn => postgres::keys::set_reason(conn, key_id, command).await?,
                    conn => sqlite::keys::set_reason(conn, key_id, command).await?,
                );
                RevokeOutcome::AlreadyRevoked {
                    revoked_at: revoked_at.into(),
                }
            }
            None => {
                let now = Millis(now_ms());
                on_tx!(tx,
                    conn => postgres::keys::revoke(conn, key_id, now, command).await?,
                    conn => sqlite::keys::revoke(conn, key_id, now, command).await?,
                );
                bump_generation(&mut tx).await?;
                RevokeOutcome::Revoked {
                    tenant_id: row.tenant_id,
                }
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Every stored key, revoked ones included, oldest first.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let rows = on_pool!(self,
            pool => postgres::keys::list(pool).await?,
            pool => sqlite::keys::list(pool).await?,
        );
        Ok(rows.into_iter().map(ApiKeyRecord::from).collect())
    }

    /// The generation of the set of valid keys: it moves with every change.
    pub async fn api_key_generation(&self) -> Result<i64> {
        Ok(on_pool!(self,
            pool => postgres::keys::generation(pool).await?,
            pool => sqlite::keys::generation(pool).await?,
        ))
    }

    /// Every valid key, with the generation they are at least as new as
    /// (read first: a change in between only makes the next check reload).
    pub async fn valid_api_keys(&self) -> Result<(i64, Vec<ValidKey>)> {
        let generation = self.api_key_generation().await?;
        let keys = on_pool!(self,
            pool => postgres::keys::valid(pool).await?,
            pool => sqlite::keys::valid(pool).await?,
        );
        Ok((generation, keys))
    }

    /// Records when keys were last used, in one statement; a time older
    /// than the stored one (from a slower process) changes nothing.
    pub async fn record_api_key_uses(&self, uses: &[(String, i64)]) -> Result<()> {
        if uses.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        on_pool!(self,
            pool => postgres::keys::record_uses(pool, uses).await?,
            pool => sqlite::keys::record_uses(pool, uses).await?,
        );
        Ok(())
    }

    /// Stored keys, revoked ones included.
    pub async fn count_api_keys(&self) -> Result<i64> {
        Ok(on_pool!(self,
            pool => postgres::keys::count(pool).await?,
            pool => sqlite::keys::count(pool).await?,
        ))
    }
}

/// Stores a new key; returns its id and visible prefix.
async fn insert_key(
    tx: &mut WriteTx,
    tenant_id: &str,
    key: &str,
    scope: &KeyScope,
) -> Result<(String, String)> {
    let (scopes, kinds) = scope.columns();
    let row = NewKeyRow {
        scopes,
        kinds,
        key_hash: hash_key(key),
        key_id: new_api_key_id(),
        tenant_id,
        key_prefix: visible_prefix(key),
        created_at: Millis(now_ms()),
    };
    on_tx!(tx,
        conn => postgres::keys::insert(conn, &row).await?,
        conn => sqlite::keys::insert(conn, &row).await?,
    );
    Ok((row.key_id, row.key_prefix))
}

async fn bump_generation(tx: &mut WriteTx) -> Result<()> {
    on_tx!(tx,
        conn => postgres::keys::bump_generation(conn).await?,
        conn => sqlite::keys::bump_generation(conn).await?,
    );
    Ok(())
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
