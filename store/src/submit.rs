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

use std::{collections::HashMap, time::Duration};

use shared::{
    model::{Job, JobStatus},
    time::now_ms,
};

use crate::{
    KeyLookup, NewJob, QueuedJob, Result, Store, StoredResponse, WriteTx,
    idempotency::{KeyRow, KeyWrite, upsert_keys},
    on_postgres, on_tx, postgres,
    sql::Millis,
    sqlite,
};

/// One submit, with the answer it will get if it makes its job.
#[derive(Debug, Clone)]
pub struct Submission {
    pub job: NewJob,
    pub created_at: i64,
    /// When its first attempt is due: `created_at` for a job that runs at
    /// once, later for a delayed one, whose outbox row waits until then.
    pub run_after: i64,
    pub key: Option<SubmissionKey>,
    /// The W3C `traceparent` of the request that made the job, kept with
    /// it so that its attempts join that trace.
    pub traceparent: Option<String>,
}

impl Submission {
    /// A submit of `job` that runs at once, without an idempotency key.
    pub fn at_once(job: NewJob, created_at: i64) -> Self {
        Submission {
            job,
            created_at,
            run_after: created_at,
            key: None,
            traceparent: None,
        }
    }

    /// Where its job ranks among its tenant's due jobs (unix ms), with
    /// `PRIORITY_AGING` of `aging`.
    pub fn rank_at(&self, aging: Duration) -> i64 {
        self.job.priority.rank_at(self.run_after, aging)
    }

    /// Whether its job waits for a later start, so that nothing publishes
    /// it before then.
    pub fn is_delayed(&self) -> bool {
        self.run_after > self.created_at
    }

    /// The job row this submit inserts, as the API shows it.
    pub fn queued(&self) -> Job {
        self.job.queued(self.created_at, self.run_after)
    }
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

impl<'a> KeyWrite<'a> {
    /// The key's row as a submit writes it.
    pub(crate) fn of(key: &'a SubmissionKey) -> Result<Self> {
        Ok(KeyWrite {
            tenant_id: &key.tenant_id,
            key: &key.key,
            fingerprint: &key.fingerprint,
            expires_at: Millis(key.expires_at),
            status: i64::from(key.response.status),
            headers: key.response.headers_json()?,
            body: &key.response.body,
        })
    }
}

/// Who publishes the jobs of a batch that run at once, which decides the
/// outbox rows they are written with. A delayed job's row is always
/// written, due and unpublished at its start: the relay publishes it then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publishing {
    /// The relay: each job's row is due at once, unpublished.
    Relay,
    /// The caller, right after the commit: each row is written as if the
    /// relay had just leased it, published again only if the job is not
    /// claimed within `republish_after_ms`, like any other.
    Caller { republish_after_ms: i64 },
    /// The caller, right after the commit, to a queue the relay sweeps for
    /// lost messages by asking it (Redis): no row at all. A job whose push
    /// never happened (its api died, or the push failed) or whose message
    /// the queue lost is found by that sweep, which writes its row then
    /// ([`Store::queued_unclaimed`]).
    CallerSwept,
    /// The job row is the queue (`queue` names it in the NOTIFY that
    /// wakes its workers): a job is claimable once its statement commits,
    /// so nothing is published after the commit, and nothing between the
    /// two can be lost: no row.
    WithTheJob { queue: String },
}

impl Publishing {
    /// The outbox rows' `republish_ms` for jobs that run at once; negative
    /// for none.
    fn republish_ms(&self) -> i64 {
        match self {
            Publishing::Relay => 0,
            Publishing::Caller { republish_after_ms } => *republish_after_ms,
            Publishing::CallerSwept | Publishing::WithTheJob { .. } => -1,
        }
    }

    /// The queue whose workers the batch's due jobs wake, when the job row
    /// is the queue.
    fn queue(&self) -> Option<&str> {
        match self {
            Publishing::WithTheJob { queue } => Some(queue),
            _ => None,
        }
    }
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
    /// The job row a submit of this job inserts, as the API shows it.
    pub fn queued(&self, created_at: i64, run_after: i64) -> Job {
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
            run_after,
            error_type: None,
            error_message: None,
            cancel_requested: false,
            retry_of: None,
            schedule_id: None,
            priority: self.priority,
            capped: None,
            worker_id: None,
            error_details: None,
        }
    }
}

impl Store {
    /// The job a committed submit puts in the queue, at its rank.
    pub fn queued_job(&self, submission: &Submission) -> QueuedJob {
        QueuedJob {
            job_id: submission.job.job_id.clone(),
            tenant_id: submission.job.tenant_id.clone(),
            rank_at: submission.rank_at(self.priority_aging),
        }
    }

    /// Writes a batch of submits in one transaction; answers in order.
    /// `publishing` says who publishes the jobs that run at once, and so
    /// which outbox rows they get ([`Publishing`]). A delayed job is never
    /// published by the caller: its row is due, unpublished, at its start.
    pub async fn submit_batch(
        &self,
        submissions: &[Submission],
        publishing: Publishing,
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
        let now = Millis(now_ms());
        let republish_ms = publishing.republish_ms();
        if let crate::Db::Postgres(pool) = &self.db {
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
            let ranks = ranks(&candidates, self.priority_aging);
            let written = on_postgres!(self, self.per_job_pool(pool), pool =>
                postgres::submit::submit_in_one_statement(
                    pool,
                    &candidates,
                    &ranks,
                    now,
                    republish_ms,
                    publishing.queue(),
                )
                .await?
            );
            let taken = taken_keys(&owners, &written);
            let refused = refused_keys(&owners, &taken);
            // A key not written was committed by another request (the
            // upsert waited for it): its answer is read after this commit,
            // as it would be inside it at this isolation level.
            let stored = if refused.is_empty() {
                StoredKeys::new()
            } else {
                let tenants: Vec<&str> = refused.iter().map(|k| k.tenant_id.as_str()).collect();
                let keys: Vec<&str> = refused.iter().map(|k| k.key.as_str()).collect();
                stored_keys(
                    &refused,
                    on_postgres!(self, pool, pool =>
                        postgres::idempotency::get_many(pool, &tenants, &keys).await?
                    ),
                )?
            };
            let (outcomes, _) = settle(submissions, &owner_of, &owners, &taken, &stored);
            return Ok(outcomes);
        }
        // SQLite: the same, as a transaction of a few statements. Where its
        // job rows are the queue, workers in other processes find new jobs
        // by looking (`store::SQLITE_LOOK`): nothing to wake.
        let mut tx = self.begin_write().await?;
        let written = if owners.is_empty() {
            Vec::new()
        } else {
            // In key order, so two batches that share keys lock them in the
            // same order and cannot deadlock.
            let mut ordered = owners.clone();
            ordered.sort_by(|a, b| (&a.tenant_id, &a.key).cmp(&(&b.tenant_id, &b.key)));
            let writes = ordered
                .iter()
                .map(|key| KeyWrite::of(key))
                .collect::<Result<Vec<_>>>()?;
            upsert_keys(&mut tx, &writes, now).await?
        };
        let taken = taken_keys(&owners, &written);
        let refused = refused_keys(&owners, &taken);
        let stored = if refused.is_empty() {
            StoredKeys::new()
        } else {
            let pairs: Vec<(&str, &str)> = refused
                .iter()
                .map(|k| (k.tenant_id.as_str(), k.key.as_str()))
                .collect();
            let (tenants, keys): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
            let rows = on_tx!(tx,
                conn => postgres::idempotency::get_many(conn, &tenants, &keys).await?,
                conn => sqlite::idempotency::get_many(conn, &pairs).await?,
            );
            stored_keys(&refused, rows)?
        };
        let (outcomes, inserting) = settle(submissions, &owner_of, &owners, &taken, &stored);
        if !inserting.is_empty() {
            insert_jobs(&mut tx, &inserting, self.priority_aging, republish_ms).await?;
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

/// The stored keys among `keys`, by (tenant, key): fingerprint and answer.
/// Borrows the names from the batch, so the map outlives the rows.
fn stored_keys<'batch>(
    keys: &[&'batch SubmissionKey],
    rows: Vec<KeyRow>,
) -> Result<StoredKeys<'batch>> {
    let mut stored = HashMap::new();
    for row in rows {
        let Some(key) = keys
            .iter()
            .find(|k| k.tenant_id == row.tenant_id && k.key == row.idem_key)
        else {
            continue;
        };
        stored.insert(
            (key.tenant_id.as_str(), key.key.as_str()),
            (row.fingerprint.clone(), row.response()?),
        );
    }
    Ok(stored)
}

/// Inserts one job (handed to the queue at once) inside `tx`: a submit
/// of one, for what makes a job without its own idempotency key (a retry).
pub(crate) async fn insert_job_now(
    tx: &mut WriteTx,
    job: NewJob,
    priority_aging: Duration,
    traceparent: Option<&str>,
) -> Result<()> {
    let submission = Submission {
        traceparent: traceparent.map(str::to_owned),
        ..Submission::at_once(job, now_ms())
    };
    insert_jobs(tx, &[&submission], priority_aging, 0).await
}

/// Inserts the jobs, each with its outbox row due `republish_ms` after it
/// was made (a delayed job's: at its start, unpublished); with a negative
/// `republish_ms`, only the delayed jobs' rows. Where the job rows are the
/// queue (`queue_in_job_rows`), none.
async fn insert_jobs(
    tx: &mut WriteTx,
    submissions: &[&Submission],
    priority_aging: Duration,
    republish_ms: i64,
) -> Result<()> {
    let ranks = ranks(submissions, priority_aging);
    on_tx!(tx,
        conn => postgres::submit::insert_jobs(conn, submissions, &ranks).await?,
        conn => sqlite::submit::insert_jobs(conn, submissions, &ranks, republish_ms).await?,
    );
    Ok(())
}

/// Where each submit's job ranks among its tenant's due jobs.
fn ranks(submissions: &[&Submission], priority_aging: Duration) -> Vec<Millis> {
    submissions
        .iter()
        .map(|s| Millis(s.rank_at(priority_aging)))
        .collect()
}
