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

use sqlx::AnyConnection;

use super::{
    KeyLookup, NewJob, Store, StoredResponse, WriteTx, built, padded_len, pairs_equal, value_rows,
};
use crate::Result;
use shared::{
    model::{Job, JobStatus},
    time::now_ms,
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
        if self.dialect == super::Dialect::Postgres {
            // One statement: keys, jobs and outbox rows commit together, in
            // one round trip instead of five.
            let candidates: Vec<&Submission> = submissions
                .iter()
                .zip(&owner_of)
                .filter(|(submission, owner)| match (&submission.key, owner) {
                    (Some(key), Some(owner)) => std::ptr::eq(owners[*owner], key),
                    _ => true,
                })
                .map(|(submission, _)| submission)
                .collect();
            let written = submit_in_one_statement(self, &candidates, published_for_ms).await?;
            let taken = taken_keys(&owners, &written);
            let refused = refused_keys(&owners, &taken);
            // A key not written was committed by another request (the
            // upsert waited for it): its answer is read after this commit,
            // as it would be inside it at this isolation level.
            let stored = if refused.is_empty() {
                StoredKeys::new()
            } else {
                stored_keys_of(&mut *self.pool.acquire().await?, &refused).await?
            };
            let (outcomes, _) = settle(submissions, &owner_of, &owners, &taken, &stored);
            return Ok(outcomes);
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
        let taken = taken_keys(&owners, &written);
        let refused = refused_keys(&owners, &taken);
        let stored = stored_keys_of(&mut tx, &refused).await?;
        let (outcomes, inserting) = settle(submissions, &owner_of, &owners, &taken, &stored);
        if !inserting.is_empty() {
            insert_jobs(&mut tx, &inserting, published_for_ms).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

/// Whether each owner's key was written by this batch.
fn taken_keys(owners: &[&SubmissionKey], written: &[(String, String)]) -> Vec<bool> {
    owners
        .iter()
        .map(|owner| {
            written
                .iter()
                .any(|(tenant, key)| *tenant == owner.tenant_id && *key == owner.key)
        })
        .collect()
}

/// A key not written is live in another request's hands (one that
/// committed, or that a concurrent writer just committed: the upsert
/// waited for it): its stored answer settles this batch's submits.
fn refused_keys<'batch>(
    owners: &[&'batch SubmissionKey],
    taken: &[bool],
) -> Vec<&'batch SubmissionKey> {
    owners
        .iter()
        .zip(taken)
        .filter(|(_, taken)| !**taken)
        .map(|(owner, _)| *owner)
        .collect()
}

type StoredKeys<'batch> = HashMap<(&'batch str, &'batch str), (String, StoredResponse)>;

/// What becomes of each submit, in order, and the submits that make jobs.
fn settle<'batch>(
    submissions: &'batch [Submission],
    owner_of: &[Option<usize>],
    owners: &[&SubmissionKey],
    taken: &[bool],
    stored: &StoredKeys<'_>,
) -> (Vec<Submitted>, Vec<&'batch Submission>) {
    let mut outcomes = Vec::with_capacity(submissions.len());
    let mut inserting: Vec<&Submission> = Vec::new();
    for (submission, owner) in submissions.iter().zip(owner_of) {
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
                Submitted::Found(KeyLookup::of(
                    Some((&first.fingerprint, &first.response)),
                    &key.fingerprint,
                ))
            }
        } else {
            // A key gone between the two statements (it expired and was
            // swept) is found new: the client may retry.
            let live = stored
                .get(&(key.tenant_id.as_str(), key.key.as_str()))
                .map(|(fingerprint, response)| (fingerprint.as_str(), response));
            Submitted::Found(KeyLookup::of(live, &key.fingerprint))
        };
        outcomes.push(outcome);
    }
    (outcomes, inserting)
}

/// Postgres: a batch's keys, jobs and outbox rows as one statement. Each
/// candidate (a submit without a key, or the first submit of its key)
/// makes its job only if its key is written, as in the transactional
/// path; keys are written in key order, so two batches that share keys
/// lock them in the same order. Returns the keys written.
async fn submit_in_one_statement(
    store: &Store,
    candidates: &[&Submission],
    published_for_ms: Option<i64>,
) -> Result<Vec<(String, String)>> {
    const COLUMNS: [&str; 13] = [
        "text", "text", "text", "text", "bigint", "bigint", "text", "text", "text", "bigint",
        "bigint", "text", "bytea",
    ];
    // Padded to a size bucket with rows of NULLs, which make nothing: a
    // few statement texts per connection (see `padded_len`).
    let listed = padded_len(candidates.len());
    let rows = (0..listed)
        .map(|row| {
            let cells: Vec<String> = COLUMNS
                .iter()
                .enumerate()
                .map(|(column, ty)| format!("${}::{ty}", 4 + row * COLUMNS.len() + column))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "WITH submitted (job_id, tenant_id, kind, params, max_attempts, created_at, key_tenant,
                         idem_key, fingerprint, expires_at, response_status, response_headers,
                         response_body) AS (VALUES {rows}),
         written AS (
             INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at,
                 expires_at, response_status, response_headers, response_body)
             SELECT key_tenant, idem_key, fingerprint, $1, expires_at, response_status,
                    response_headers, response_body
             FROM submitted WHERE idem_key IS NOT NULL ORDER BY key_tenant, idem_key
             {KEY_CONFLICT}
         ), inserted AS (
             INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at,
                               run_after, status)
             SELECT s.job_id, s.tenant_id, s.kind, s.params, s.max_attempts, s.created_at,
                    s.created_at, $3
             FROM submitted s
             WHERE s.job_id IS NOT NULL AND (s.idem_key IS NULL OR EXISTS (
                 SELECT 1 FROM written w
                 WHERE w.tenant_id = s.key_tenant AND w.idem_key = s.idem_key))
             RETURNING job_id, created_at
         ), queued AS (
             INSERT INTO outbox (job_id, publish_at, republish_ms)
             SELECT job_id, created_at + $2, $2 FROM inserted
         )
         SELECT tenant_id, idem_key FROM written"
    );
    let mut query = sqlx::query(built(&sql))
        .bind(shared::time::now_ms())
        .bind(published_for_ms.unwrap_or(0))
        .bind(JobStatus::Queued.as_str());
    for s in candidates {
        query = bind_job(query, s);
        query = match &s.key {
            Some(key) => query
                .bind(&key.tenant_id)
                .bind(&key.key)
                .bind(&key.fingerprint)
                .bind(key.expires_at)
                .bind(i64::from(key.response.status))
                .bind(headers_json(&key.response)?)
                .bind(key.response.body.as_slice()),
            None => bind_no_key(query),
        };
    }
    for _ in candidates.len()..listed {
        let no_job = query
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<i64>);
        query = bind_no_key(no_job);
    }
    query
        .fetch_all(&store.pool)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("tenant_id")?, row.try_get("idem_key")?)))
        .collect()
}

/// NULL for each key column of a submit's row: a submit without a key.
fn bind_no_key(query: AnyQuery<'_>) -> AnyQuery<'_> {
    query
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(None::<i64>)
        .bind(None::<i64>)
        .bind(None::<String>)
        .bind(None::<Vec<u8>>)
}

fn headers_json(response: &StoredResponse) -> Result<String> {
    serde_json::to_string(&response.headers)
        .map_err(|e| crate::Error::Corrupt(format!("headers: {e}")))
}

/// The stored keys among `keys`, by (tenant, key): fingerprint and answer.
async fn stored_keys_of<'batch>(
    conn: &mut AnyConnection,
    keys: &[&'batch SubmissionKey],
) -> Result<StoredKeys<'batch>> {
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
    for row in query.fetch_all(&mut *conn).await? {
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

/// Inserts one job (and its outbox row, due now) inside `tx`: a submit
/// of one, for what makes a job without its own idempotency key (a retry).
pub(super) async fn insert_job_now(tx: &mut WriteTx, job: NewJob) -> Result<()> {
    let submission = Submission {
        job,
        created_at: now_ms(),
        key: None,
    };
    insert_jobs(tx, &[&submission], None).await
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
        query = bind_job(query, s)
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

/// A new key is inserted, an expired one taken over in place, a live one
/// left alone; the keys written are returned.
const KEY_CONFLICT: &str = "ON CONFLICT (tenant_id, idem_key) DO UPDATE SET
        fingerprint = excluded.fingerprint, created_at = excluded.created_at,
        expires_at = excluded.expires_at, response_status = excluded.response_status,
        response_headers = excluded.response_headers, response_body = excluded.response_body
    WHERE idempotency_keys.expires_at <= excluded.created_at
    RETURNING tenant_id, idem_key";

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds a submit's job columns: id, tenant, kind, params, max attempts,
/// created at.
fn bind_job<'q>(query: AnyQuery<'q>, s: &'q Submission) -> AnyQuery<'q> {
    query
        .bind(&s.job.job_id)
        .bind(&s.job.tenant_id)
        .bind(&s.job.kind)
        .bind(&s.job.params)
        .bind(s.job.max_attempts)
        .bind(s.created_at)
}

/// Writes the keys with their answers: a new key is inserted, an expired
/// one taken over in place, a live one left alone. Returns the keys
/// written, as (tenant, key).
async fn upsert_keys(tx: &mut WriteTx, keys: &[&SubmissionKey]) -> Result<Vec<(String, String)>> {
    let sql = format!(
        "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
             response_status, response_headers, response_body)
         VALUES {} {KEY_CONFLICT}",
        value_rows(1, keys.len(), 8)
    );
    let now = now_ms();
    let mut query = sqlx::query(built(&sql));
    for key in keys {
        let headers = headers_json(&key.response)?;
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
