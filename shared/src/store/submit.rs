//! Submits written in groups: one transaction inserts every job, outbox
//! row and idempotency key waiting at that moment (group commit). Every
//! guard of the single path holds per submit: a live key replays its
//! stored answer or refuses another request, and two submits with one key
//! in a batch make one job.
//!
//! The keys are written first, each by an upsert on the key's primary
//! key, and only the keys it did not write are read back: the common case
//! (every key new) reads nothing. A lookup of many keys at once was the
//! costly part: Postgres answered it by reading every key of the tenant.

use std::collections::HashMap;

use sqlx::Row;

use super::{KeyLookup, NewJob, Store, StoredResponse, WriteTx, built, pairs_equal, value_rows};
use crate::{
    Result,
    model::{Job, JobStatus},
};

/// One submit, with the answer it will get if it makes its job.
#[derive(Debug, Clone)]
pub struct Submission {
    pub job: NewJob,
    pub created_at: i64,
    pub key: Option<SubmissionKey>,
}

#[derive(Debug, Clone)]
pub struct SubmissionKey {
    pub tenant_id: String,
    pub key: String,
    pub fingerprint: String,
    pub expires_at: i64,
    /// The 202 to store against the key (and to replay to a duplicate).
    pub response: StoredResponse,
}

/// What became of one submit of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Its job and key are committed: answer with its own response.
    Inserted,
    /// Its key was already used (earlier, by a concurrent writer that
    /// committed first, or by a submit ahead of it in the batch): replay
    /// that answer or refuse.
    Found(KeyLookup),
}

impl NewJob {
    /// The job row this submit inserts, as the API shows it.
    pub fn queued(&self, created_at: i64) -> Job {
        Job {
            job_id: self.job_id.clone(),
            tenant_id: self.tenant_id.clone(),
            kind: self.kind.clone(),
            params: self.params.clone(),
            status: JobStatus::Queued,
            attempts: 0,
            max_attempts: self.max_attempts,
            progress: None,
            created_at,
            started_at: None,
            finished_at: None,
            run_after: created_at,
            error_type: None,
            error_message: None,
            cancel_requested: false,
            retry_of: None,
        }
    }
}

impl Store {
    /// Writes a batch of submits in one transaction; answers in order.
    /// With `published_for_ms`, the caller publishes the inserted jobs
    /// itself right after the commit (the embedded queue), so their outbox
    /// rows are written as if the relay had just leased them: published
    /// again only if not claimed by then, like any other.
    pub async fn submit_batch(
        &self,
        submissions: &[Submission],
        published_for_ms: Option<i64>,
    ) -> Result<Vec<Submitted>> {
        // The first submit of each key owns it; the others follow it.
        let mut owners: Vec<&SubmissionKey> = Vec::new();
        let mut owner_of: Vec<Option<usize>> = Vec::with_capacity(submissions.len());
        for submission in submissions {
            owner_of.push(submission.key.as_ref().map(|key| {
                match owners
                    .iter()
                    .position(|owner| owner.tenant_id == key.tenant_id && owner.key == key.key)
                {
                    Some(owner) => owner,
                    None => {
                        owners.push(key);
                        owners.len() - 1
                    }
                }
            }));
        }
        let mut tx = self.begin_write().await?;
        let written = if owners.is_empty() {
            Vec::new()
        } else {
            // In key order, so two batches that share keys lock them in the
            // same order and cannot deadlock.
            let mut ordered = owners.clone();
            ordered.sort_by(|a, b| (&a.tenant_id, &a.key).cmp(&(&b.tenant_id, &b.key)));
            upsert_keys(&mut tx, &ordered).await?
        };
        let taken: Vec<bool> = owners
            .iter()
            .map(|owner| {
                written
                    .iter()
                    .any(|(tenant, key)| *tenant == owner.tenant_id && *key == owner.key)
            })
            .collect();
        // A key not written is live in another request's hands (one that
        // committed, or that a concurrent writer just committed: the upsert
        // waited for it): its stored answer settles this batch's submits.
        let refused: Vec<&SubmissionKey> = owners
            .iter()
            .zip(&taken)
            .filter(|(_, taken)| !**taken)
            .map(|(owner, _)| *owner)
            .collect();
        let stored = stored_keys_of(&mut tx, &refused).await?;
        let mut outcomes = Vec::with_capacity(submissions.len());
        let mut inserting: Vec<&Submission> = Vec::new();
        for (submission, owner) in submissions.iter().zip(&owner_of) {
            let (Some(key), Some(owner)) = (&submission.key, owner) else {
                inserting.push(submission);
                outcomes.push(Submitted::Inserted);
                continue;
            };
            let outcome = if taken[*owner] {
                let first = owners[*owner];
                if std::ptr::eq(first, key) {
                    inserting.push(submission);
                    Submitted::Inserted
                } else {
                    Submitted::Found(replay_or_mismatch(
                        &first.fingerprint,
                        &key.fingerprint,
                        &first.response,
                    ))
                }
            } else {
                match stored.get(&(key.tenant_id.as_str(), key.key.as_str())) {
                    Some((fingerprint, response)) => Submitted::Found(replay_or_mismatch(
                        fingerprint,
                        &key.fingerprint,
                        response,
                    )),
                    // Gone between the two statements (it expired and was
                    // swept): the client may retry.
                    None => Submitted::Found(KeyLookup::New),
                }
            };
            outcomes.push(outcome);
        }
        if !inserting.is_empty() {
            insert_jobs(&mut tx, &inserting, published_for_ms).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

/// The stored keys among `keys`, by (tenant, key): fingerprint and answer.
async fn stored_keys_of<'batch>(
    tx: &mut WriteTx,
    keys: &[&'batch SubmissionKey],
) -> Result<HashMap<(&'batch str, &'batch str), (String, StoredResponse)>> {
    let mut stored = HashMap::new();
    if keys.is_empty() {
        return Ok(stored);
    }
    let sql = format!(
        "SELECT tenant_id, idem_key, fingerprint, response_status, response_headers,
                response_body
         FROM idempotency_keys WHERE {}",
        pairs_equal(1, keys.len(), "tenant_id", "idem_key")
    );
    let mut query = sqlx::query(built(&sql));
    for key in keys {
        query = query.bind(&key.tenant_id).bind(&key.key);
    }
    for row in query.fetch_all(&mut **tx).await? {
        let (tenant_id, idem_key): (String, String) =
            (row.try_get("tenant_id")?, row.try_get("idem_key")?);
        // Borrow the names from the batch, so the map outlives the rows.
        let Some(key) = keys
            .iter()
            .find(|k| k.tenant_id == tenant_id && k.key == idem_key)
        else {
            continue;
        };
        let response = super::idempotency::stored_response(&row)?;
        stored.insert(
            (key.tenant_id.as_str(), key.key.as_str()),
            (row.try_get("fingerprint")?, response),
        );
    }
    Ok(stored)
}

fn replay_or_mismatch(stored: &str, asked: &str, response: &StoredResponse) -> KeyLookup {
    if stored == asked {
        KeyLookup::Replay(response.clone())
    } else {
        KeyLookup::Mismatch
    }
}

async fn insert_jobs(
    tx: &mut WriteTx,
    submissions: &[&Submission],
    published_for_ms: Option<i64>,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                           status)
         VALUES {}",
        value_rows(1, submissions.len(), 8)
    );
    let mut query = sqlx::query(built(&sql));
    for s in submissions {
        query = query
            .bind(&s.job.job_id)
            .bind(&s.job.tenant_id)
            .bind(&s.job.kind)
            .bind(&s.job.params)
            .bind(s.job.max_attempts)
            .bind(s.created_at)
            .bind(s.created_at)
            .bind(JobStatus::Queued.as_str());
    }
    query.execute(&mut **tx).await?;
    let sql = format!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms) VALUES {}",
        value_rows(1, submissions.len(), 3)
    );
    let republish_ms = published_for_ms.unwrap_or(0);
    let mut query = sqlx::query(built(&sql));
    for s in submissions {
        query = query
            .bind(&s.job.job_id)
            .bind(s.created_at + republish_ms)
            .bind(republish_ms);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

/// Writes the keys with their answers: a new key is inserted, an expired
/// one taken over in place, a live one left alone. Returns the keys
/// written, as (tenant, key).
async fn upsert_keys(tx: &mut WriteTx, keys: &[&SubmissionKey]) -> Result<Vec<(String, String)>> {
    let sql = format!(
        "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
             response_status, response_headers, response_body)
         VALUES {}
         ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
             fingerprint = excluded.fingerprint, created_at = excluded.created_at,
             expires_at = excluded.expires_at, response_status = excluded.response_status,
             response_headers = excluded.response_headers, response_body = excluded.response_body
         WHERE idempotency_keys.expires_at <= excluded.created_at
         RETURNING tenant_id, idem_key",
        value_rows(1, keys.len(), 8)
    );
    let now = crate::time::now_ms();
    let mut query = sqlx::query(built(&sql));
    for key in keys {
        let headers = serde_json::to_string(&key.response.headers)
            .map_err(|e| crate::Error::Corrupt(format!("headers: {e}")))?;
        query = query
            .bind(&key.tenant_id)
            .bind(&key.key)
            .bind(&key.fingerprint)
            .bind(now)
            .bind(key.expires_at)
            .bind(i64::from(key.response.status))
            .bind(headers)
            .bind(key.response.body.as_slice());
    }
    query
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("tenant_id")?, row.try_get("idem_key")?)))
        .collect()
}
