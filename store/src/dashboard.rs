//! What the web dashboard reads and writes: its sessions, and the figures
//! of its overview and webhooks pages. Every figure is scoped to a tenant.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use shared::{ids::random_hex, model::JobStatus, time::now_ms};

use crate::{Db, Error, Result, Store, hash_key, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::dashboard::{NewSessionRow, SessionRow};

/// A session just opened: the only time its token is known.
#[derive(Debug, Clone)]
pub struct NewDashboardSession {
    /// The cookie's value; only its hash is stored.
    pub token: String,
    pub csrf_token: String,
    pub expires_at: i64,
}

/// A session that has not expired.
#[derive(Debug, Clone)]
pub struct DashboardSession {
    pub tenant_id: String,
    /// The hash of the API key it was opened with.
    pub key_hash: String,
    pub csrf_token: String,
    pub expires_at: i64,
}

/// A tenant's jobs counted by status, and by kind and status.
#[derive(Debug, Clone, Default)]
pub struct JobCounts {
    pub by_status: HashMap<JobStatus, i64>,
    /// Kind -> count by status, kinds in name order.
    pub by_kind: Vec<(String, HashMap<JobStatus, i64>)>,
    /// When the oldest QUEUED job was submitted.
    pub oldest_queued_at: Option<i64>,
}

/// Jobs that reached a final status in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThroughputMinute {
    /// The minute's start, unix milliseconds.
    pub start: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// How a webhook's recent deliveries went.
#[derive(Debug, Clone, Default)]
pub struct WebhookHealth {
    /// Delivery attempts since the time asked.
    pub attempts: i64,
    /// Of those, the ones answered with a 2xx.
    pub succeeded: i64,
    /// The latest attempt that failed (ever): when, and why.
    pub last_error: Option<(i64, String)>,
}

const MINUTE_MS: i64 = 60_000;

/// Deltas folded at once past which the fold vacuums their table.
const VACUUM_AFTER: u64 = 10_000;

impl From<SessionRow> for DashboardSession {
    fn from(row: SessionRow) -> Self {
        DashboardSession {
            tenant_id: row.tenant_id,
            key_hash: row.key_hash,
            csrf_token: row.csrf_token,
            expires_at: row.expires_at.into(),
        }
    }
}

fn status_of(text: &str) -> Result<JobStatus> {
    JobStatus::parse(text).ok_or_else(|| Error::Corrupt(format!("job status {text:?}")))
}

/// The tag of a session token: HMAC-SHA256 of its random part, keyed by
/// the hash of the API key it was opened with, which never leaves the
/// server.
fn session_mac(key_hash: &str, random: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key_hash.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(random.as_bytes());
    mac
}

/// A session token: `{key_id}.{random}.{tag}`. Its tag lets a process
/// tell a token it could have issued from a made-up one in memory, by the
/// valid keys it holds, before any query.
fn new_session_token(key_id: &str, key_hash: &str) -> String {
    let random = random_hex(32);
    let tag = hex::encode(session_mac(key_hash, &random).finalize().into_bytes());
    format!("{key_id}.{random}.{tag}")
}

/// What a session token is, as told in memory by the valid keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCheck {
    /// Its tag is right for the valid key it names: worth a look in the
    /// database (it may still have expired or been closed).
    Issued,
    /// It has a token's shape but names no valid key: one since revoked,
    /// or made up.
    NoKey,
    /// Not a token this service issues.
    Invalid,
}

/// Checks a session token by the hash of the key it names (`key_hash_of`,
/// from the valid keys in memory): no query.
pub fn check_session_token(
    token: &str,
    key_hash_of: impl FnOnce(&str) -> Option<String>,
) -> TokenCheck {
    let mut parts = token.splitn(3, '.');
    let (Some(key_id), Some(random), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
        return TokenCheck::Invalid;
    };
    if tag.len() != 64 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return TokenCheck::Invalid;
    }
    let Some(key_hash) = key_hash_of(key_id) else {
        return TokenCheck::NoKey;
    };
    let Ok(tag) = hex::decode(tag) else {
        return TokenCheck::Invalid;
    };
    if session_mac(&key_hash, random).verify_slice(&tag).is_ok() {
        TokenCheck::Issued
    } else {
        TokenCheck::Invalid
    }
}

impl Store {
    /// Opens a session for a tenant signed in with the key of this id and
    /// hash, valid for `ttl_ms`; sessions already expired are deleted on
    /// the way.
    pub async fn create_dashboard_session(
        &self,
        tenant_id: &str,
        key_id: &str,
        key_hash: &str,
        ttl_ms: i64,
    ) -> Result<NewDashboardSession> {
        let now = now_ms();
        let session = NewDashboardSession {
            token: new_session_token(key_id, key_hash),
            csrf_token: random_hex(32),
            expires_at: now.saturating_add(ttl_ms),
        };
        let row = NewSessionRow {
            session_hash: hash_key(&session.token),
            tenant_id,
            key_hash,
            csrf_token: &session.csrf_token,
            created_at: Millis(now),
            expires_at: Millis(session.expires_at),
        };
        let mut tx = self.begin_write().await?;
        on_tx!(tx,
            conn => {
                postgres::dashboard::delete_expired_sessions(&mut *conn, Millis(now)).await?;
                postgres::dashboard::insert_session(conn, &row).await?;
            },
            conn => {
                sqlite::dashboard::delete_expired_sessions(&mut *conn, Millis(now)).await?;
                sqlite::dashboard::insert_session(conn, &row).await?;
            },
        );
        tx.commit().await?;
        Ok(session)
    }

    /// The session of this cookie token, unless it expired or was closed.
    pub async fn dashboard_session(&self, token: &str) -> Result<Option<DashboardSession>> {
        let session_hash = hash_key(token);
        let now = Millis(now_ms());
        let row = on_pool!(self,
            pool => postgres::dashboard::session(pool, &session_hash, now).await?,
            pool => sqlite::dashboard::session(pool, &session_hash, now).await?,
        );
        Ok(row.map(DashboardSession::from))
    }

    /// Closes a session (sign-out).
    pub async fn delete_dashboard_session(&self, token: &str) -> Result<()> {
        let session_hash = hash_key(token);
        let _turn = self.write_turn().await;
        on_pool!(self,
            pool => postgres::dashboard::delete_session(pool, &session_hash).await?,
            pool => sqlite::dashboard::delete_session(pool, &session_hash).await?,
        );
        Ok(())
    }

    /// The tenant's jobs counted by status and by kind, from the counters
    /// the triggers on `jobs` keep (migration `job_counts`): the folded
    /// rows plus the deltas not yet folded, in one statement so that a fold
    /// committing meanwhile is seen whole or not at all. Its cost is the
    /// tenant's kinds times statuses, and the deltas of the last few
    /// seconds, whatever the number of jobs retained.
    pub async fn job_counts(&self, tenant_id: &str) -> Result<JobCounts> {
        let rows = on_pool!(self,
            pool => postgres::dashboard::counts(pool, tenant_id).await?,
            pool => sqlite::dashboard::counts(pool, tenant_id).await?,
        );
        let mut counts = JobCounts::default();
        for row in rows {
            let status = status_of(&row.status)?;
            *counts.by_status.entry(status).or_default() += row.n;
            match counts.by_kind.last_mut() {
                Some((last, by_status)) if *last == row.kind => {
                    by_status.insert(status, row.n);
                }
                _ => counts
                    .by_kind
                    .push((row.kind, HashMap::from([(status, row.n)]))),
            }
        }
        let oldest = on_pool!(self,
            pool => postgres::dashboard::oldest_queued(pool, tenant_id).await?,
            pool => sqlite::dashboard::oldest_queued(pool, tenant_id).await?,
        );
        counts.oldest_queued_at = oldest.map(i64::from);
        Ok(counts)
    }

    /// Jobs that reached a final status in each of the `minutes` whole
    /// minutes up to now, oldest first (a minute without any is zeros).
    pub async fn throughput(&self, tenant_id: &str, minutes: i64) -> Result<Vec<ThroughputMinute>> {
        let end = (now_ms() / MINUTE_MS + 1) * MINUTE_MS;
        let since = end - minutes * MINUTE_MS;
        let rows = on_pool!(self,
            pool => postgres::dashboard::minutes(pool, tenant_id, Millis(since)).await?,
            pool => sqlite::dashboard::minutes(pool, tenant_id, Millis(since)).await?,
        );
        let mut series: Vec<ThroughputMinute> = (0..minutes)
            .map(|i| ThroughputMinute {
                start: since + i * MINUTE_MS,
                ..ThroughputMinute::default()
            })
            .collect();
        for row in rows {
            let minute = (i64::from(row.start) - since).div_euclid(MINUTE_MS);
            let Some(slot) = usize::try_from(minute).ok().and_then(|i| series.get_mut(i)) else {
                continue;
            };
            match row.status.as_str() {
                "SUCCEEDED" => slot.succeeded += row.n,
                "FAILED" => slot.failed += row.n,
                _ => slot.cancelled += row.n,
            }
        }
        Ok(series)
    }

    /// Folds the counters' deltas (written by the triggers on `jobs` on
    /// Postgres) into `job_counts` and `job_minutes`, and deletes the
    /// minutes that no longer hold a job. Safe to call from many processes
    /// at once: one folds, the others return at once. Returns the deltas
    /// folded.
    pub async fn fold_job_counts(&self) -> Result<u64> {
        let pool = match &self.db {
            Db::Postgres(pool) => pool,
            Db::Sqlite(db) => {
                // SQLite's triggers count in place: only the emptied minutes
                // are left to drop, in one statement of its own.
                let _turn = self.write_turn().await;
                sqlite::dashboard::delete_empty_minutes(&db.pool).await?;
                return Ok(0);
            }
        };
        let mut tx = pool.begin().await?;
        // Folders take turns, so the upserts never wait on (or deadlock
        // with) each other; the triggers never touch these rows.
        if !postgres::dashboard::try_lock_fold(&mut tx).await? {
            return Ok(0);
        }
        let folded = postgres::dashboard::fold(&mut tx).await?;
        postgres::dashboard::delete_empty_minutes(&mut *tx).await?;
        tx.commit().await?;
        let folded = u64::try_from(folded).unwrap_or_default();
        if folded >= VACUUM_AFTER {
            // A reader scans the deltas' heap, dead rows included: after a
            // burst (a bulk insert, a large prune), reclaim it now rather
            // than when autovacuum gets to it.
            postgres::dashboard::vacuum_deltas(pool).await?;
        }
        Ok(folded)
    }

    /// How the deliveries of these webhooks (of the tenant) went since
    /// `since`, with each one's last failed attempt, by webhook id.
    pub async fn webhook_health(
        &self,
        tenant_id: &str,
        webhook_ids: &[String],
        since: i64,
    ) -> Result<HashMap<String, WebhookHealth>> {
        let mut health: HashMap<String, WebhookHealth> = webhook_ids
            .iter()
            .map(|id| (id.clone(), WebhookHealth::default()))
            .collect();
        if webhook_ids.is_empty() {
            return Ok(health);
        }
        let since = Millis(since);
        let rows = on_pool!(self,
            pool => postgres::dashboard::health(pool, tenant_id, since, webhook_ids).await?,
            pool => sqlite::dashboard::health(pool, tenant_id, since, webhook_ids).await?,
        );
        for row in rows {
            if let Some(entry) = health.get_mut(&row.webhook_id) {
                entry.attempts = row.attempts;
                entry.succeeded = row.ok;
            }
        }
        for id in webhook_ids {
            let last = on_pool!(self,
                pool => postgres::dashboard::last_failure(pool, tenant_id, id).await?,
                pool => sqlite::dashboard::last_failure(pool, tenant_id, id).await?,
            );
            if let (Some(row), Some(entry)) = (last, health.get_mut(id)) {
                let why = match (row.response_status, row.error) {
                    (_, Some(error)) => error,
                    (Some(status), None) => format!("answered {status}"),
                    (None, None) => "failed".to_owned(),
                };
                entry.last_error = Some((row.attempted_at.into(), why));
            }
        }
        Ok(health)
    }
}
