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

use serde_json::json;

use crate::{
    Actor, AuditAction, AuditChange, Error, Result, Store, WriteTx, on_pool, on_tx, postgres,
    sql::Millis, sqlite,
};

/// Who adds and revokes keys to match `API_KEYS`.
const API_KEYS_AT_START: Actor = Actor::Command("api start (API_KEYS)");

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

/// One right a key can hold (`docs/api-keys.md`, Scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Jobs, results, kinds, workers, schedules, webhooks (never their
    /// secrets), periods and the filing endpoint.
    Read,
    /// Reports (but `period-close`) and ledger imports; cancelling and
    /// retrying jobs.
    Submit,
    /// Webhooks, schedules, the filing endpoint and registered kinds.
    Manage,
    /// `period-close` and reopening a month.
    Close,
    /// The tenant's keys and its audit log.
    Admin,
    /// Leasing and reporting attempts of registered kinds.
    Work,
}

impl Scope {
    /// Every scope, in the order they are shown.
    pub const ALL: [Scope; 6] = [
        Scope::Read,
        Scope::Submit,
        Scope::Manage,
        Scope::Close,
        Scope::Admin,
        Scope::Work,
    ];

    /// What a key of full rights holds: every scope but `work`.
    pub const FULL: [Scope; 5] = [
        Scope::Read,
        Scope::Submit,
        Scope::Manage,
        Scope::Close,
        Scope::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Manage => "manage",
            Scope::Close => "close",
            Scope::Admin => "admin",
            Scope::Work => "work",
        }
    }

    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// What a key may do: a set of [`Scope`]s, and for `work` the kinds it
/// may take (all of the tenant's registered kinds when `None`).
///
/// A key stored without scopes (every key made before keys had scopes,
/// every key of `API_KEYS`, and every key made without `--scope`) is of
/// full rights: every scope but `work`, including scopes a later release
/// adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyScope {
    bits: u8,
    full: bool,
    kinds: Option<Vec<String>>,
}

impl KeyScope {
    /// Full rights: every scope but `work`.
    pub fn full() -> Self {
        KeyScope {
            bits: Scope::FULL.iter().fold(0, |bits, scope| bits | scope.bit()),
            full: true,
            kinds: None,
        }
    }

    /// These scopes; `kinds` narrows `work` to some registered kinds.
    pub fn of(scopes: &[Scope], kinds: Option<Vec<String>>) -> Self {
        KeyScope {
            bits: scopes.iter().fold(0, |bits, scope| bits | scope.bit()),
            full: false,
            kinds: kinds.filter(|_| scopes.contains(&Scope::Work)),
        }
    }

    /// The `work` scope alone.
    pub fn work(kinds: Option<Vec<String>>) -> Self {
        KeyScope::of(&[Scope::Work], kinds)
    }

    /// Parses a comma-separated list of scope names (`read,submit`).
    pub fn parse_list(list: &str) -> std::result::Result<Vec<Scope>, String> {
        let mut scopes = Vec::new();
        for name in list.split(',').map(str::trim) {
            let scope = Scope::parse(name).ok_or_else(|| {
                format!(
                    "{name:?} is not a scope; the scopes are {}",
                    Scope::ALL.map(Scope::name).join(", ")
                )
            })?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        Ok(scopes)
    }

    fn parse(scopes: Option<&str>, kinds: Option<&str>) -> Option<Self> {
        let Some(list) = scopes else {
            return Some(KeyScope::full());
        };
        let scopes = KeyScope::parse_list(list).ok()?;
        let kinds = match kinds {
            None => None,
            Some(list) => Some(serde_json::from_str(list).ok()?),
        };
        Some(KeyScope::of(&scopes, kinds))
    }

    /// Whether the key holds this scope.
    pub fn allows(&self, scope: Scope) -> bool {
        self.bits & scope.bit() != 0
    }

    /// Whether this is a key of full rights (stored without scopes).
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// The scopes held, in [`Scope::ALL`]'s order.
    pub fn scopes(&self) -> Vec<Scope> {
        Scope::ALL
            .into_iter()
            .filter(|scope| self.allows(*scope))
            .collect()
    }

    /// The registered kinds a `work` key is narrowed to.
    pub fn kinds(&self) -> Option<&[String]> {
        self.kinds.as_deref()
    }

    /// Whether the key may take attempts of `kind`.
    pub fn may_work_on(&self, kind: &str) -> bool {
        self.allows(Scope::Work)
            && self
                .kinds
                .as_ref()
                .is_none_or(|kinds| kinds.iter().any(|known| known == kind))
    }

    /// The scopes as `api keys list` and the API show them: `read,submit`,
    /// or `work(sales-export)` for a key narrowed to some kinds.
    pub fn describe(&self) -> String {
        self.scopes()
            .into_iter()
            .map(|scope| match (scope, &self.kinds) {
                (Scope::Work, Some(kinds)) => format!("work({})", kinds.join(",")),
                (scope, _) => scope.name().to_owned(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    fn columns(&self) -> (Option<String>, Option<String>) {
        if self.full {
            return (None, None);
        }
        let names: Vec<&str> = self.scopes().into_iter().map(Scope::name).collect();
        (
            Some(names.join(",")),
            self.kinds
                .as_ref()
                .map(|kinds| serde_json::Value::from(kinds.clone()).to_string()),
        )
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
    pub created_at: i64,
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
    pub async fn create_api_key(&self, tenant_id: &str, actor: &Actor) -> Result<NewApiKey> {
        self.create_scoped_api_key(tenant_id, &KeyScope::full(), actor)
            .await
    }

    /// Makes and stores a new key for the tenant, of this scope.
    pub async fn create_scoped_api_key(
        &self,
        tenant_id: &str,
        scope: &KeyScope,
        actor: &Actor,
    ) -> Result<NewApiKey> {
        let mut tx = self.begin_write().await?;
        let created = self.add_api_key(&mut tx, tenant_id, scope, actor).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// [`Store::create_scoped_api_key`] in the caller's transaction.
    pub async fn add_api_key(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        scope: &KeyScope,
        actor: &Actor,
    ) -> Result<NewApiKey> {
        let key = new_api_key();
        let (key_id, key_prefix, created_at) = insert_key(tx, tenant_id, &key, scope).await?;
        bump_generation(tx).await?;
        let change = AuditChange {
            tenant_id: Some(tenant_id),
            action: AuditAction::KeyCreated,
            target: Some(&key_id),
            details: json!({ "scopes": scope.describe(), "prefix": key_prefix }),
        };
        self.audit(tx, actor, &change).await?;
        Ok(NewApiKey {
            key_id,
            key,
            key_prefix,
            created_at,
        })
    }

    /// Makes the stored keys match `API_KEYS`, the complete list of valid
    /// keys of full rights: a listed key is added, moved to its listed
    /// tenant, or restored if a start without it revoked it; every other
    /// stored key of full rights is revoked (keys with scopes are not
    /// `API_KEYS`' to manage).
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
                let full = KeyScope::full();
                let (key_id, key_prefix, _) = insert_key(&mut tx, tenant_id, key, &full).await?;
                let change = AuditChange {
                    tenant_id: Some(tenant_id),
                    action: AuditAction::KeyCreated,
                    target: Some(&key_id),
                    details: json!({ "scopes": full.describe(), "prefix": key_prefix }),
                };
                self.audit(&mut tx, &API_KEYS_AT_START, &change).await?;
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
            // A key with scopes is never one of `API_KEYS` (which makes
            // keys of full rights): it is managed by the commands and the
            // API, so a start leaves it alone.
            if row.revoked_at.is_none() && row.scopes.is_none() && !listed.contains(key_hash) {
                on_tx!(tx,
                    conn => postgres::keys::revoke(conn, &row.key_id, now, reason).await?,
                    conn => sqlite::keys::revoke(conn, &row.key_id, now, reason).await?,
                );
                let change = AuditChange {
                    tenant_id: Some(&row.tenant_id),
                    action: AuditAction::KeyRevoked,
                    target: Some(&row.key_id),
                    details: json!({ "reason": "not in API_KEYS" }),
                };
                self.audit(&mut tx, &API_KEYS_AT_START, &change).await?;
                sync.revoked += 1;
            }
        }
        if sync.changed() {
            bump_generation(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(sync)
    }

    /// Revokes the key with this id (of this tenant only, when one is
    /// given). A key that a start without it in `API_KEYS` had revoked is
    /// now revoked for good.
    pub async fn revoke_api_key(
        &self,
        tenant_id: Option<&str>,
        key_id: &str,
        actor: &Actor,
    ) -> Result<RevokeOutcome> {
        let mut tx = self.begin_write().await?;
        let row = on_tx!(tx,
            conn => postgres::keys::lock_state(conn, key_id).await?,
            conn => sqlite::keys::state(conn, key_id).await?,
        );
        let Some(row) = row.filter(|row| tenant_id.is_none_or(|tenant| tenant == row.tenant_id))
        else {
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
                let change = AuditChange {
                    tenant_id: Some(&row.tenant_id),
                    action: AuditAction::KeyRevoked,
                    target: Some(key_id),
                    details: json!({}),
                };
                self.audit(&mut tx, actor, &change).await?;
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

    /// The tenant's stored keys, revoked ones included, oldest first.
    pub async fn tenant_api_keys(&self, tenant_id: &str) -> Result<Vec<ApiKeyRecord>> {
        let rows = on_pool!(self,
            pool => postgres::keys::list_of(pool, tenant_id).await?,
            pool => sqlite::keys::list_of(pool, tenant_id).await?,
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

/// Stores a new key; returns its id, visible prefix and creation time.
async fn insert_key(
    tx: &mut WriteTx,
    tenant_id: &str,
    key: &str,
    scope: &KeyScope,
) -> Result<(String, String, i64)> {
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
    Ok((row.key_id, row.key_prefix, row.created_at.0))
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
