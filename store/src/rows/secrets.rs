//! Secrets at rest: the rows of data keys, and of secrets being sealed
//! anew.

use crate::sql::Millis;

/// A data key as stored: wrapped under the master key its fingerprint
/// names.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DataKeyRow {
    pub(crate) key_id: String,
    pub(crate) master_fingerprint: String,
    pub(crate) wrapped_key: String,
}

/// A new data key's row.
pub(crate) struct NewDataKey<'a> {
    pub key_id: &'a str,
    pub master_fingerprint: &'a str,
    pub wrapped_key: &'a str,
    pub created_at: Millis,
}

/// A secret as a row holds it: sealed (`sealed_secret` under the data
/// key `secret_key_id`), or still in clear in `secret` (written by a
/// release before secrets were sealed).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct StoredSecret {
    pub(crate) secret: Option<String>,
    pub(crate) sealed_secret: Option<String>,
    pub(crate) secret_key_id: Option<String>,
}

/// A secret to seal anew, with the key of its row (`webhook_id`, or a
/// filing endpoint's `tenant_id`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SecretToSeal {
    pub(crate) row_key: String,
    pub(crate) secret: Option<String>,
    pub(crate) sealed_secret: Option<String>,
    pub(crate) secret_key_id: Option<String>,
}

impl SecretToSeal {
    pub(crate) fn stored(&self) -> StoredSecret {
        StoredSecret {
            secret: self.secret.clone(),
            sealed_secret: self.sealed_secret.clone(),
            secret_key_id: self.secret_key_id.clone(),
        }
    }
}

/// A secret sealed for a row, as its columns store it.
pub(crate) struct SealedSecret<'a> {
    pub sealed_secret: String,
    pub secret_key_id: String,
    /// What the clear column holds once sealed: NULL on Postgres; SQLite
    /// keeps the column NOT NULL (see the migration `secrets_at_rest`).
    pub cleared: Option<&'a str>,
}
