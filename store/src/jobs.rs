//! Jobs as their clients see them: reads, lists, the cancel and the retry.

use shared::{
    model::{Cap, Job, JobStatus, Priority},
    time::now_ms,
};

use crate::{Error, Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::jobs::JobRow;

impl TryFrom<JobRow> for Job {
    type Error = Error;

    fn try_from(row: JobRow) -> Result<Job> {
        Ok(Job {
            status: JobStatus::parse(&row.status)
                .ok_or_else(|| Error::Corrupt(format!("job status {:?}", row.status)))?,
            job_id: row.job_id,
            tenant_id: row.tenant_id,
            kind: row.kind,
            params: row.params.into(),
            // Attempts handed back at a shutdown do not count.
            attempts: row.attempts - row.handbacks,
            max_attempts: row.max_attempts,
            progress: row.progress,
            created_at: row.created_at.into(),
            started_at: row.started_at.map(i64::from),
            finished_at: row.finished_at.map(i64::from),
            run_after: row.run_after.into(),
            error_type: row.error_type,
            error_message: row.error_message,
            cancel_requested: row.cancel_requested,
            retry_of: row.retry_of,
            schedule_id: row.schedule_id,
            priority: Priority::parse(&row.priority)
                .ok_or_else(|| Error::Corrupt(format!("job priority {:?}", row.priority)))?,
            capped: row
                .capped
                .map(|capped| {
                    Cap::parse(&capped).ok_or_else(|| Error::Corrupt(format!("job cap {capped:?}")))
                })
                .transpose()?,
            worker_id: row.worker_id,
            error_details: row.error_details.map(String::from),
        })
    }
}

/// The job a row holds, if any.
pub(crate) fn job_of(row: Option<JobRow>) -> Result<Option<Job>> {
    row.map(Job::try_from).transpose()
}

/// What a kind gives a job made of it: how many attempts it has, and
/// whether the tenant's workers over HTTP lease it (a registered kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindTerms {
    pub max_attempts: i64,
    pub external: bool,
}

/// A new job, as the API inserts it.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub params: String,
    pub max_attempts: i64,
    pub priority: Priority,
    /// A registered kind's job: leased by workers over HTTP, never
    /// claimed by the built-in ones.
    pub external: bool,
}

/// Filters and page of `GET /v1/jobs`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub status: Option<JobStatus>,
    pub kind: Option<String>,
    /// Only the jobs this schedule made (not combined with the others).
    pub schedule_id: Option<String>,
    /// Only jobs older than this one (the cursor).
    pub before: Option<String>,
    pub limit: i64,
}

/// What became of a retry (`POST /v1/jobs/{id}/retry`).
#[derive(Debug, Clone)]
pub enum RetryOutcome {
    /// The new job, queued.
    Created(Job),
    /// The job is not FAILED or CANCELLED.
    NotRetryable(Job),
    /// The job's kind is not one this process runs (a diagnostic kind
    /// while those are disabled): `None` from the caller's lookup.
    UnknownKind(Job),
    NotFound,
}

#[derive(Debug, Clone)]
pub enum CancelOutcome {
    /// Cancelled now, or already cancelled, or a running job was asked to stop.
    Done(Job),
    /// Already `SUCCEEDED` or `FAILED`.
    Conflict(Job),
    NotFound,
}

impl Store {
    pub async fn get_job(&self, tenant_id: &str, job_id: &str) -> Result<Option<Job>> {
        job_of(on_pool!(self,
            pool => postgres::jobs::get(pool, tenant_id, job_id).await?,
            pool => sqlite::jobs::get(pool, tenant_id, job_id).await?,
        ))
    }

    /// The job, locked until the transaction ends (Postgres; SQLite's
    /// writer lock already serializes).
    pub(crate) async fn lock_job(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<Job>> {
        job_of(on_tx!(tx,
            conn => postgres::jobs::lock(conn, tenant_id, job_id).await?,
            conn => sqlite::jobs::get(conn, tenant_id, job_id).await?,
        ))
    }

    /// The job as this transaction sees it.
    pub(crate) async fn job_in(&self, tx: &mut WriteTx, job_id: &str) -> Result<Option<Job>> {
        job_of(on_tx!(tx,
            conn => postgres::jobs::get_unscoped(conn, job_id).await?,
            conn => sqlite::jobs::get_unscoped(conn, job_id).await?,
        ))
    }

    /// Any tenant's job (a worker knows a job by its id only).
    pub async fn get_job_unscoped(&self, job_id: &str) -> Result<Option<Job>> {
        job_of(on_pool!(self,
            pool => postgres::jobs::get_unscoped(pool, job_id).await?,
            pool => sqlite::jobs::get_unscoped(pool, job_id).await?,
        ))
    }

    /// Newest first; asks for one more than the limit so the caller knows
    /// whether a next page exists.
    pub async fn list_jobs(&self, tenant_id: &str, filter: &JobFilter) -> Result<Vec<Job>> {
        if let Some(schedule_id) = &filter.schedule_id {
            let before = filter.before.as_deref().unwrap_or("~");
            let rows = on_pool!(self,
                pool => postgres::jobs::list_of_schedule(pool, tenant_id, schedule_id, before, filter.limit + 1).await?,
                pool => sqlite::jobs::list_of_schedule(pool, tenant_id, schedule_id, before, filter.limit + 1).await?,
            );
            return rows.into_iter().map(Job::try_from).collect();
        }
        let rows = on_pool!(self,
            pool => postgres::jobs::list(pool, tenant_id, filter).await?,
            pool => sqlite::jobs::list(pool, tenant_id, filter).await?,
        );
        rows.into_iter().map(Job::try_from).collect()
    }

    /// The tenant's jobs that are QUEUED or RUNNING (for `MAX_ACTIVE_JOBS`).
    pub async fn count_active_jobs(&self, tenant_id: &str) -> Result<i64> {
        Ok(on_pool!(self,
            pool => postgres::jobs::count_active(pool, tenant_id).await?,
            pool => sqlite::jobs::count_active(pool, tenant_id).await?,
        ))
    }

    /// The cancel of `docs/api.md`: a queued job is cancelled at once, a
    /// running one is asked to stop at its next checkpoint.
    pub async fn cancel_job(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<CancelOutcome> {
        let Some(job) = self.lock_job(tx, tenant_id, job_id).await? else {
            return Ok(CancelOutcome::NotFound);
        };
        // A running job is asked to stop. So is a saga waiting for its next
        // attempt with steps to undo: that attempt runs the compensations,
        // then ends it CANCELLED.
        let ask_to_stop = match job.status {
            JobStatus::Running => true,
            JobStatus::Queued => self.saga_unfinished(tx, job_id).await?,
            _ => false,
        };
        let outcome = match job.status {
            _ if ask_to_stop => {
                let row = on_tx!(tx,
                    conn => postgres::jobs::ask_to_stop(conn, job_id).await?,
                    conn => sqlite::jobs::ask_to_stop(conn, job_id).await?,
                );
                CancelOutcome::Done(row.try_into()?)
            }
            JobStatus::Queued => {
                let now = Millis(now_ms());
                let row = on_tx!(tx,
                    conn => postgres::jobs::cancel_queued(conn, job_id, now).await?,
                    conn => sqlite::jobs::cancel_queued(conn, job_id, now).await?,
                );
                crate::outbox::delete_outbox(tx, job_id).await?;
                // A lapsed attempt may have left chunks for its successor.
                crate::results::discard_all_chunks(tx, job_id).await?;
                self.announce_final(tx, job_id, None).await?;
                CancelOutcome::Done(row.try_into()?)
            }
            JobStatus::Running | JobStatus::Cancelled => CancelOutcome::Done(job),
            JobStatus::Succeeded | JobStatus::Failed => CancelOutcome::Conflict(job),
        };
        Ok(outcome)
    }

    /// Retries a FAILED or CANCELLED job as a new job `new_job_id` with the
    /// same kind and parameters, linked to it by `retry_of`. The original
    /// is locked, so its status cannot change under the check; it keeps
    /// its one final status. `max_attempts` names the attempt limit of a
    /// kind, `None` for a kind this process does not run.
    pub async fn retry_job(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        job_id: &str,
        new_job_id: &str,
        terms: impl FnOnce(&str) -> Option<KindTerms>,
        traceparent: Option<&str>,
    ) -> Result<RetryOutcome> {
        let Some(original) = self.lock_job(tx, tenant_id, job_id).await? else {
            return Ok(RetryOutcome::NotFound);
        };
        if !matches!(original.status, JobStatus::Failed | JobStatus::Cancelled) {
            return Ok(RetryOutcome::NotRetryable(original));
        }
        let Some(terms) = terms(&original.kind) else {
            return Ok(RetryOutcome::UnknownKind(original));
        };
        let new_job = NewJob {
            job_id: new_job_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            kind: original.kind.clone(),
            params: original.params.clone(),
            max_attempts: terms.max_attempts,
            // A retry keeps the original's priority.
            priority: original.priority,
            external: terms.external,
        };
        crate::submit::insert_job_now(tx, new_job, self.priority_aging, traceparent).await?;
        let row = on_tx!(tx,
            conn => postgres::jobs::mark_retry_of(conn, new_job_id, job_id).await?,
            conn => sqlite::jobs::mark_retry_of(conn, new_job_id, job_id).await?,
        );
        Ok(RetryOutcome::Created(row.try_into()?))
    }

    /// The jobs that retry this one, oldest first.
    pub async fn retries_of(&self, tenant_id: &str, job_id: &str) -> Result<Vec<String>> {
        Ok(on_pool!(self,
            pool => postgres::jobs::retries_of(pool, tenant_id, job_id).await?,
            pool => sqlite::jobs::retries_of(pool, tenant_id, job_id).await?,
        ))
    }
}
