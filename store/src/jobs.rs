//! Jobs as their clients see them: reads, lists, the cancel and the retry.

use sqlx::{Row, any::AnyRow};

use super::{Store, WriteTx, built, outbox::delete_outbox, results::discard_all_chunks};
use crate::Result;
use shared::{
    model::{Job, JobStatus},
    time::now_ms,
};

const JOB_COLUMNS: &str = "job_id, tenant_id, kind, params, status, attempts, max_attempts, \
     progress, created_at, started_at, finished_at, run_after, error_type, error_message, \
     cancel_requested, handbacks, retry_of";

fn job_from_row(row: &AnyRow) -> Result<Job> {
    let status: String = row.try_get("status")?;
    Ok(Job {
        job_id: row.try_get("job_id")?,
        tenant_id: row.try_get("tenant_id")?,
        kind: row.try_get("kind")?,
        params: row.try_get("params")?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| crate::Error::Corrupt(format!("job status {status:?}")))?,
        attempts: row.try_get::<i64, _>("attempts")? - row.try_get::<i64, _>("handbacks")?,
        max_attempts: row.try_get("max_attempts")?,
        progress: row.try_get("progress")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        run_after: row.try_get("run_after")?,
        error_type: row.try_get("error_type")?,
        error_message: row.try_get("error_message")?,
        cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
        retry_of: row.try_get("retry_of")?,
    })
}

/// A new job, as the API inserts it.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub params: String,
    pub max_attempts: i64,
}

/// Filters and page of `GET /v1/jobs`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub status: Option<JobStatus>,
    pub kind: Option<String>,
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
        let row = sqlx::query(built(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1 AND tenant_id = $2"
        )))
        .bind(job_id)
        .bind(tenant_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// The job, locked until the transaction ends (Postgres; SQLite's
    /// writer lock already serializes).
    pub(super) async fn lock_job(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<Job>> {
        let row = sqlx::query(built(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1 AND tenant_id = $2{}",
            self.dialect.for_update()
        )))
        .bind(job_id)
        .bind(tenant_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// The job as this transaction sees it.
    pub(super) async fn job_in(&self, tx: &mut WriteTx, job_id: &str) -> Result<Option<Job>> {
        let row = sqlx::query(built(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1"
        )))
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Any tenant's job (a worker knows a job by its id only).
    pub async fn get_job_unscoped(&self, job_id: &str) -> Result<Option<Job>> {
        let row = sqlx::query(built(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1"
        )))
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Newest first; asks for one more than the limit so the caller knows
    /// whether a next page exists.
    pub async fn list_jobs(&self, tenant_id: &str, filter: &JobFilter) -> Result<Vec<Job>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant_id = $1");
        let mut n = 1;
        let mut next = || {
            n += 1;
            n
        };
        if filter.status.is_some() {
            sql += &format!(" AND status = ${}", next());
        }
        if filter.kind.is_some() {
            sql += &format!(" AND kind = ${}", next());
        }
        if filter.before.is_some() {
            sql += &format!(" AND job_id < ${}", next());
        }
        sql += &format!(" ORDER BY job_id DESC LIMIT ${}", next());
        let mut query = sqlx::query(built(&sql)).bind(tenant_id);
        if let Some(status) = filter.status {
            query = query.bind(status.as_str());
        }
        if let Some(kind) = &filter.kind {
            query = query.bind(kind.as_str());
        }
        if let Some(before) = &filter.before {
            query = query.bind(before.as_str());
        }
        let rows = query.bind(filter.limit + 1).fetch_all(&self.pool).await?;
        rows.iter().map(job_from_row).collect()
    }

    /// The tenant's jobs that are QUEUED or RUNNING (for `MAX_ACTIVE_JOBS`).
    pub async fn count_active_jobs(&self, tenant_id: &str) -> Result<i64> {
        // Literals: for parameters Postgres's generic plan guesses 2 jobs in
        // 5 active and may scan the table (one tenant, 300,000 jobs: 290 ms
        // against 20 ms); with literals it sees how few are.
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM jobs
             WHERE tenant_id = $1 AND status IN ('QUEUED', 'RUNNING')",
        )
        .bind(tenant_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("n")?)
    }

    /// The cancel of `docs/api.md`: a queued job is cancelled at once, a
    /// running one is asked to stop at its next checkpoint.
    pub async fn cancel_job(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<CancelOutcome> {
        let row = sqlx::query(built(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1 AND tenant_id = $2{}",
            self.dialect.for_update()
        )))
        .bind(job_id)
        .bind(tenant_id)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(job) = row.as_ref().map(job_from_row).transpose()? else {
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
                let row = sqlx::query(built(&format!(
                    "UPDATE jobs SET cancel_requested = 1 WHERE job_id = $1 RETURNING {JOB_COLUMNS}"
                )))
                .bind(job_id)
                .fetch_one(&mut **tx)
                .await?;
                CancelOutcome::Done(job_from_row(&row)?)
            }
            JobStatus::Queued => {
                let row = sqlx::query(built(&format!(
                    "UPDATE jobs SET status = $3, finished_at = $2
                     WHERE job_id = $1 RETURNING {JOB_COLUMNS}"
                )))
                .bind(job_id)
                .bind(now_ms())
                .bind(JobStatus::Cancelled.as_str())
                .fetch_one(&mut **tx)
                .await?;
                delete_outbox(tx, job_id).await?;
                // A lapsed attempt may have left chunks for its successor.
                discard_all_chunks(tx, job_id).await?;
                self.announce_final(tx, job_id).await?;
                CancelOutcome::Done(job_from_row(&row)?)
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
        max_attempts: impl FnOnce(&str) -> Option<i64>,
    ) -> Result<RetryOutcome> {
        let Some(original) = self.lock_job(tx, tenant_id, job_id).await? else {
            return Ok(RetryOutcome::NotFound);
        };
        if !matches!(original.status, JobStatus::Failed | JobStatus::Cancelled) {
            return Ok(RetryOutcome::NotRetryable(original));
        }
        let Some(max_attempts) = max_attempts(&original.kind) else {
            return Ok(RetryOutcome::UnknownKind(original));
        };
        let new_job = NewJob {
            job_id: new_job_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            kind: original.kind.clone(),
            params: original.params.clone(),
            max_attempts,
        };
        super::submit::insert_job_now(tx, new_job).await?;
        let row = sqlx::query(built(&format!(
            "UPDATE jobs SET retry_of = $2 WHERE job_id = $1 RETURNING {JOB_COLUMNS}"
        )))
        .bind(new_job_id)
        .bind(job_id)
        .fetch_one(&mut **tx)
        .await?;
        Ok(RetryOutcome::Created(job_from_row(&row)?))
    }

    /// The jobs that retry this one, oldest first.
    pub async fn retries_of(&self, tenant_id: &str, job_id: &str) -> Result<Vec<String>> {
        sqlx::query(
            "SELECT job_id FROM jobs WHERE retry_of = $1 AND tenant_id = $2 ORDER BY job_id",
        )
        .bind(job_id)
        .bind(tenant_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok(row.try_get("job_id")?))
        .collect()
    }
}
