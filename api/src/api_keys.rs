//! Bearer API keys, checked in memory. Each api process holds the hash of
//! every valid key (a map bounded by the number of keys), so a good key
//! and a bad one are both answered without a database query: a flood of
//! wrong keys cannot load the database. A background task reads one row,
//! the keys' generation, every second, and reloads the set only when it
//! moved; that is how a key revoked or added by any process (another api,
//! `api keys revoke`) reaches this one within about a second. When a key
//! was last used is written at most once a minute per key, in one
//! transaction for all of them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use shared::time::now_ms;
use store::{KeyScope, Store, TokenCheck, check_session_token, hash_key};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often a process checks whether the set of valid keys changed: a
/// revoked key is refused everywhere within about this long.
pub const KEY_REFRESH: Duration = Duration::from_secs(1);

/// How often the last use of each key is written.
const USE_FLUSH: Duration = Duration::from_secs(60);

/// This process's copy of the valid keys, and the uses not yet written.
#[derive(Clone)]
pub struct ApiKeys {
    valid: Arc<RwLock<ValidKeys>>,
    /// key id -> when it was last used, since the last write.
    uses: Arc<Mutex<HashMap<String, i64>>>,
}

struct ValidKeys {
    generation: i64,
    by_hash: HashMap<String, KeyOwner>,
    /// key id -> its hash, to check a dashboard session's token.
    hash_by_id: HashMap<String, String>,
}

struct KeyOwner {
    key_id: String,
    tenant_id: String,
    scope: KeyScope,
}

/// Whom a valid key belongs to, and what it may do.
#[derive(Debug, Clone)]
pub struct KeyHolder {
    pub key_id: String,
    pub tenant_id: String,
    pub scope: KeyScope,
}

impl ApiKeys {
    /// Loads every valid key.
    pub async fn load(store: &Store) -> store::Result<Self> {
        let keys = ApiKeys {
            valid: Arc::new(RwLock::new(ValidKeys {
                generation: i64::MIN,
                by_hash: HashMap::new(),
                hash_by_id: HashMap::new(),
            })),
            uses: Arc::default(),
        };
        keys.reload(store).await?;
        Ok(keys)
    }

    async fn reload(&self, store: &Store) -> store::Result<()> {
        let (generation, keys) = store.valid_api_keys().await?;
        let hash_by_id = keys
            .iter()
            .map(|key| (key.key_id.clone(), key.key_hash.clone()))
            .collect();
        // A key whose stored scope this build does not know opens nothing.
        let by_hash = keys
            .into_iter()
            .filter_map(|key| {
                let scope = key.scope()?;
                Some((
                    key.key_hash,
                    KeyOwner {
                        key_id: key.key_id,
                        tenant_id: key.tenant_id,
                        scope,
                    },
                ))
            })
            .collect();
        *self.valid.write().unwrap_or_else(|e| e.into_inner()) = ValidKeys {
            generation,
            by_hash,
            hash_by_id,
        };
        Ok(())
    }

    fn generation(&self) -> i64 {
        self.valid
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .generation
    }

    /// Reloads the keys if their generation moved since the last load.
    pub async fn refresh(&self, store: &Store) -> store::Result<()> {
        if store.api_key_generation().await? != self.generation() {
            self.reload(store).await?;
        }
        Ok(())
    }

    /// Whom a valid key belongs to and what it may do, noting the use;
    /// no database query.
    pub fn holder(&self, key: &str) -> Option<KeyHolder> {
        let hash = hash_key(key);
        let valid = self.valid.read().unwrap_or_else(|e| e.into_inner());
        let owner = valid.by_hash.get(&hash)?;
        self.note_use(&owner.key_id);
        Some(KeyHolder {
            key_id: owner.key_id.clone(),
            tenant_id: owner.tenant_id.clone(),
            scope: owner.scope.clone(),
        })
    }

    /// Whether a dashboard session token could have been issued for one
    /// of the valid keys ([`check_session_token`]): a made-up cookie is
    /// refused here, without a query, as a wrong key is.
    pub fn check_session_token(&self, token: &str) -> TokenCheck {
        let valid = self.valid.read().unwrap_or_else(|e| e.into_inner());
        check_session_token(token, |key_id| valid.hash_by_id.get(key_id).cloned())
    }

    /// [`ApiKeys::holder`] for a key known by its hash (a dashboard
    /// session's), noting the use.
    pub fn holder_of_hash(&self, hash: &str) -> Option<KeyHolder> {
        let valid = self.valid.read().unwrap_or_else(|e| e.into_inner());
        let owner = valid.by_hash.get(hash)?;
        self.note_use(&owner.key_id);
        Some(KeyHolder {
            key_id: owner.key_id.clone(),
            tenant_id: owner.tenant_id.clone(),
            scope: owner.scope.clone(),
        })
    }

    fn note_use(&self, key_id: &str) {
        let now = now_ms();
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        match uses.get_mut(key_id) {
            Some(used_at) => *used_at = now,
            None => {
                uses.insert(key_id.to_owned(), now);
            }
        }
    }

    /// Writes the uses noted since the last write; on failure they are
    /// kept for the next one.
    pub async fn flush_uses(&self, store: &Store) {
        let uses: Vec<(String, i64)> =
            std::mem::take(&mut *self.uses.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        if let Err(error) = store.record_api_key_uses(&uses).await {
            warn!(%error, keys = uses.len(), "recording when API keys were last used failed; trying again later");
            let mut pending = self.uses.lock().unwrap_or_else(|e| e.into_inner());
            for (key_id, used_at) in uses {
                let entry = pending.entry(key_id).or_insert(used_at);
                *entry = (*entry).max(used_at);
            }
        }
    }

    /// Keeps the keys fresh ([`KEY_REFRESH`]) and writes their uses
    /// ([`USE_FLUSH`]) until shutdown. The caller writes the last uses
    /// once the server has stopped.
    pub async fn keep_fresh(self, store: Store, shutdown: CancellationToken) {
        let mut refresh = tokio::time::interval(KEY_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut flush = tokio::time::interval(USE_FLUSH);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        flush.tick().await;
        let mut failing = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = refresh.tick() => match self.refresh(&store).await {
                    Ok(()) if failing => {
                        failing = false;
                        info!("API keys are being refreshed again");
                    }
                    Ok(()) => {}
                    // A process that cannot read the keys keeps the last
                    // set it read; the database it would check a
                    // revocation in is the one it cannot reach.
                    Err(error) if !failing => {
                        failing = true;
                        warn!(%error, "cannot refresh the API keys; keeping the last set read");
                    }
                    Err(_) => {}
                },
                _ = flush.tick() => self.flush_uses(&store).await,
            }
        }
    }
}
