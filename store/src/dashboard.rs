//! What the web dashboard reads and writes: its sessions, and the figures
//! of its overview and webhooks pages. Every query is scoped to a tenant.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use sqlx::Row;

use super::{Store, built, hash_key, placeholders};
use crate::Result;
use shared::{ids::random_hex, model::JobStatus, time::now_ms};

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

/// The advisory lock a fold of the job counters holds (any fixed number
/// no other lock of the service uses).
const FOLD_LOCK: i64 = 0x6a6f_6263_6f75_6e74;

/// Deltas folded at once past which the fold vacuums their table.
const VACUUM_AFTER: u64 = 10_000;

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
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM dashboard_sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO dashboard_sessions (session_hash, tenant_id, key_hash, csrf_token,
                 created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(hash_key(&session.token))
        .bind(tenant_id)
        .bind(key_hash)
        .bind(&session.csrf_token)
        .bind(now)
        .bind(session.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(session)
    }

    /// The session of this cookie token, unless it expired or was closed.
    pub async fn dashboard_session(&self, token: &str) -> Result<Option<DashboardSession>> {
        let row = sqlx::query(
            "SELECT tenant_id, key_hash, csrf_token, expires_at FROM dashboard_sessions
             WHERE session_hash = $1 AND expires_at > $2",
        )
        .bind(hash_key(token))
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(DashboardSession {
                tenant_id: row.try_get("tenant_id")?,
                key_hash: row.try_get("key_hash")?,
                csrf_token: row.try_get("csrf_token")?,
                expires_at: row.try_get("expires_at")?,
            })
        })
        .transpose()
    }

    /// Closes a session (sign-out).
    pub async fn delete_dashboard_session(&self, token: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM dashboard_sessions WHERE session_hash = $1")
            .bind(hash_key(token))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The tenant's jobs counted by status and by kind, from the counters
    /// the triggers on `jobs` keep (migration `job_counts`): the folded
    /// rows plus the deltas not yet folded, in one statement so that a fold
    /// committing meanwhile is seen whole or not at all. Its cost is the
    /// tenant's kinds times statuses, and the deltas of the last few
    /// seconds, whatever the number of jobs retained.
    pub async fn job_counts(&self, tenant_id: &str) -> Result<JobCounts> {
        let rows = sqlx::query(
            "SELECT kind, status, CAST(SUM(n) AS BIGINT) AS n FROM (
                 SELECT kind, status, n FROM job_counts WHERE tenant_id = $1
                 UNION ALL
                 SELECT kind, status, delta FROM job_count_deltas WHERE tenant_id = $1
             ) AS c
             GROUP BY kind, status HAVING SUM(n) <> 0 ORDER BY kind",
        )
        .bind(tenant_id)
        .fetch_all(&self.pool)
        .await?;
        let mut counts = JobCounts::default();
        for row in &rows {
            let kind: String = row.try_get("kind")?;
            let status: String = row.try_get("status")?;
            let n: i64 = row.try_get("n")?;
            let status = JobStatus::parse(&status)
                .ok_or_else(|| crate::Error::Corrupt(format!("job status {status:?}")))?;
            *counts.by_status.entry(status).or_default() += n;
            match counts.by_kind.last_mut() {
                Some((last, by_status)) if *last == kind => {
                    by_status.insert(status, n);
                }
                _ => counts.by_kind.push((kind, HashMap::from([(status, n)]))),
            }
        }
        // Ids are time-ordered: the smallest queued id is the oldest.
        // A literal: with a parameter, Postgres's generic plan walks the
        // primary key through every finished job (300 ms against 0.03 ms
        // on 300,000 jobs) instead of jobs_by_tenant_status.
        let oldest = sqlx::query(
            "SELECT created_at FROM jobs WHERE tenant_id = $1 AND status = 'QUEUED'
             ORDER BY job_id LIMIT 1",
        )
        .bind(tenant_id)
        .fetch_optional(&self.pool)
        .await?;
        counts.oldest_queued_at = oldest.map(|row| row.try_get("created_at")).transpose()?;
        Ok(counts)
    }

    /// Jobs that reached a final status in each of the `minutes` whole
    /// minutes up to now, oldest first (a minute without any is zeros).
    pub async fn throughput(&self, tenant_id: &str, minutes: i64) -> Result<Vec<ThroughputMinute>> {
        let end = (now_ms() / MINUTE_MS + 1) * MINUTE_MS;
        let since = end - minutes * MINUTE_MS;
        // From the per-minute counters (as job_counts): 60 rows per status
        // at most, plus the deltas not yet folded.
        let rows = sqlx::query(
            "SELECT minute, status, CAST(SUM(n) AS BIGINT) AS n FROM (
                 SELECT minute, status, n FROM job_minutes WHERE tenant_id = $1 AND minute >= $2
                 UNION ALL
                 SELECT minute, status, delta FROM job_count_deltas
                 WHERE tenant_id = $1 AND minute >= $2
             ) AS m
             GROUP BY minute, status",
        )
        .bind(tenant_id)
        .bind(since / MINUTE_MS)
        .fetch_all(&self.pool)
        .await?;
        let mut series: Vec<ThroughputMinute> = (0..minutes)
            .map(|i| ThroughputMinute {
                start: since + i * MINUTE_MS,
                ..ThroughputMinute::default()
            })
            .collect();
        for row in &rows {
            let minute = row.try_get::<i64, _>("minute")? - since / MINUTE_MS;
            let status: String = row.try_get("status")?;
            let n: i64 = row.try_get("n")?;
            let Some(slot) = usize::try_from(minute).ok().and_then(|i| series.get_mut(i)) else {
                continue;
            };
            match status.as_str() {
                "SUCCEEDED" => slot.succeeded += n,
                "FAILED" => slot.failed += n,
                _ => slot.cancelled += n,
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
        if self.dialect == super::Dialect::Sqlite {
            // SQLite's triggers count in place: only the emptied minutes
            // are left to drop, in one statement of its own.
            let _turn = self.write_turn().await;
            sqlx::query("DELETE FROM job_minutes WHERE n = 0")
                .execute(&self.pool)
                .await?;
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let mut folded = 0;
        if self.dialect == super::Dialect::Postgres {
            // Folders take turns, so the upserts below never wait on (or
            // deadlock with) each other; the triggers never touch these rows.
            let ours: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                .bind(FOLD_LOCK)
                .fetch_one(&mut *tx)
                .await?;
            if !ours {
                return Ok(0);
            }
            // Only deltas committed before the statement began are deleted
            // and folded; later ones wait for the next fold.
            folded = sqlx::query(
                "WITH d AS (
                     DELETE FROM job_count_deltas RETURNING tenant_id, kind, status, minute, delta
                 ), counted AS (
                     INSERT INTO job_counts (tenant_id, kind, status, n)
                     SELECT tenant_id, kind, status, SUM(delta) FROM d
                     GROUP BY tenant_id, kind, status
                     ON CONFLICT (tenant_id, kind, status)
                     DO UPDATE SET n = job_counts.n + EXCLUDED.n
                 ), minutes AS (
                     INSERT INTO job_minutes (tenant_id, minute, status, n)
                     SELECT tenant_id, minute, status, SUM(delta) FROM d WHERE minute IS NOT NULL
                     GROUP BY tenant_id, minute, status
                     ON CONFLICT (tenant_id, minute, status)
                     DO UPDATE SET n = job_minutes.n + EXCLUDED.n
                 )
                 SELECT COUNT(*) FROM d",
            )
            .fetch_one(&mut *tx)
            .await?
            .try_get::<i64, _>(0)?
            .try_into()
            .unwrap_or_default();
        }
        sqlx::query("DELETE FROM job_minutes WHERE n = 0")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        if folded >= VACUUM_AFTER {
            // A reader scans the deltas' heap, dead rows included: after a
            // burst (a bulk insert, a large prune), reclaim it now rather
            // than when autovacuum gets to it.
            sqlx::query("VACUUM job_count_deltas")
                .execute(&self.pool)
                .await?;
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
        let ids = placeholders(3, webhook_ids.len());
        let sql = format!(
            "SELECT d.webhook_id, COUNT(*) AS attempts,
                    SUM(CASE WHEN d.response_status BETWEEN 200 AND 299 THEN 1 ELSE 0 END) AS ok
             FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
             WHERE w.tenant_id = $1 AND d.attempted_at >= $2 AND d.webhook_id IN ({ids})
             GROUP BY d.webhook_id"
        );
        let mut query = sqlx::query(built(&sql)).bind(tenant_id).bind(since);
        for id in webhook_ids {
            query = query.bind(id);
        }
        for row in query.fetch_all(&self.pool).await? {
            let id: String = row.try_get("webhook_id")?;
            if let Some(entry) = health.get_mut(&id) {
                entry.attempts = row.try_get("attempts")?;
                entry.succeeded = row.try_get("ok")?;
            }
        }
        for id in webhook_ids {
            let last = sqlx::query(
                "SELECT d.attempted_at, d.response_status, d.error
                 FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
                 WHERE d.webhook_id = $1 AND w.tenant_id = $2
                   AND (d.response_status IS NULL OR d.response_status NOT BETWEEN 200 AND 299)
                 ORDER BY d.delivery_id DESC LIMIT 1",
            )
            .bind(id)
            .bind(tenant_id)
            .fetch_optional(&self.pool)
            .await?;
            if let (Some(row), Some(entry)) = (last, health.get_mut(id)) {
                let status: Option<i64> = row.try_get("response_status")?;
                let error: Option<String> = row.try_get("error")?;
                let why = match (status, error) {
                    (_, Some(error)) => error,
                    (Some(status), None) => format!("answered {status}"),
                    (None, None) => "failed".to_owned(),
                };
                entry.last_error = Some((row.try_get("attempted_at")?, why));
            }
        }
        Ok(health)
    }
}
