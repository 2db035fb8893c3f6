//! API keys: the rows its statements read and write.

use crate::sql::Millis;

/// A stored key, as the sync with `API_KEYS` reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StoredKeyRow {
    pub(crate) key_hash: String,
    pub(crate) key_id: String,
    pub(crate) tenant_id: String,
    pub(crate) revoked_at: Option<Millis>,
    pub(crate) revoked_reason: Option<String>,
    /// NULL for a key of full rights, the only kind `API_KEYS` holds.
    pub(crate) scopes: Option<String>,
}

/// Whom a key belongs to and whether it is revoked, as a revocation reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KeyStateRow {
    pub(crate) tenant_id: String,
    pub(crate) revoked_at: Option<Millis>,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApiKeyRow {
    pub(crate) key_id: String,
    pub(crate) tenant_id: String,
    pub(crate) key_prefix: Option<String>,
    pub(crate) created_at: Millis,
    pub(crate) last_used_at: Option<Millis>,
    pub(crate) revoked_at: Option<Millis>,
    pub(crate) revoked_reason: Option<String>,
    pub(crate) scopes: Option<String>,
    pub(crate) kinds: Option<String>,
}

/// A new key's row.
pub(crate) struct NewKeyRow<'a> {
    pub key_hash: String,
    pub key_id: String,
    pub tenant_id: &'a str,
    pub key_prefix: String,
    pub created_at: Millis,
    /// The scopes' names, comma-separated, or NULL for a key of full
    /// rights ([`crate::KeyScope`]).
    pub scopes: Option<String>,
    /// A work key's kinds, as a JSON list; NULL for every kind.
    pub kinds: Option<String>,
}
