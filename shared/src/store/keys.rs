//! API keys, stored as SHA-256 hashes: a key is a random 256-bit secret, so
//! a fast hash is enough and lets every request be checked cheaply.

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::Store;
use crate::{Result, time::now_ms};

pub fn hash_key(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new key: `rk_` + 64 hex characters of OS randomness.
pub fn new_key() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "rk_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

impl Store {
    /// Stores the key's hash for the tenant; a known key is left as it is.
    pub async fn add_api_key(&self, tenant_id: &str, key: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO api_keys (key_hash, tenant_id, created_at) VALUES ($1, $2, $3)
             ON CONFLICT (key_hash) DO NOTHING",
        )
        .bind(hash_key(key))
        .bind(tenant_id)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn tenant_of_key_hash(&self, key_hash: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT tenant_id FROM api_keys WHERE key_hash = $1")
            .bind(key_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("tenant_id")).transpose()?)
    }

    pub async fn count_api_keys(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM api_keys")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }
}
