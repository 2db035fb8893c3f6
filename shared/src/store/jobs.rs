//! Jobs, their outbox rows and results.
//!
//! The fencing token of an attempt is the job's `attempts` value when it was
//! claimed: every write an attempt makes is conditional on it, so a stale or
//! duplicated attempt changes nothing.

use sqlx::{Row, any::AnyRow};

use super::{
    Store, WriteTx, built, padded_len, pairs_equal, placeholders, results::discard_all_chunks,
    sagas::SAGA_UNFINISHED, value_rows,
};
use crate::{
    Result,
    model::{AttemptOutcome, Job, JobStatus, ResultBody},
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

/// What a fenced `... RETURNING cancel_requested` found: no row means the
/// attempt is no longer the current one.
fn lease_check(row: Option<AnyRow>) -> Result<LeaseCheck> {
    Ok(match row {
        Some(row) => LeaseCheck::Held {
            cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
        },
        None => LeaseCheck::Lost,
    })
}

/// A job the queue is to carry: its id, and its tenant, which the queue
/// schedules fairly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub job_id: String,
    pub tenant_id: String,
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

/// What a worker gets when its claim of an attempt wins.
#[derive(Debug, Clone)]
pub struct Claim {
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub params: String,
    /// The fencing token: grows on every claim, hand-backs included.
    pub attempt: i64,
    /// Which attempt this is against `max_attempts`: attempts handed back
    /// at a shutdown do not count.
    pub counted_attempt: i64,
    pub max_attempts: i64,
}

fn claim_from_row(row: &AnyRow) -> Result<Claim> {
    let attempt: i64 = row.try_get("attempts")?;
    Ok(Claim {
        job_id: row.try_get("job_id")?,
        tenant_id: row.try_get("tenant_id")?,
        kind: row.try_get("kind")?,
        params: row.try_get("params")?,
        attempt,
        counted_attempt: attempt - row.try_get::<i64, _>("handbacks")?,
        max_attempts: row.try_get("max_attempts")?,
    })
}

/// What a heartbeat learns about its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCheck {
    Held {
        cancel_requested: bool,
    },
    /// Another attempt took over, or the job was finished: stop quietly.
    Lost,
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
                    "UPDATE jobs SET status = 'CANCELLED', finished_at = $2
                     WHERE job_id = $1 RETURNING {JOB_COLUMNS}"
                )))
                .bind(job_id)
                .bind(now_ms())
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

    /// Leases up to `limit` due outbox rows for publishing: their next
    /// publish time moves `republish_after_ms` ahead (doubling on each
    /// republish, up to 32 times), so a message the queue loses is sent
    /// again then, and concurrent relays do not take the same rows.
    pub async fn take_due_outbox(
        &self,
        limit: i64,
        republish_after_ms: i64,
    ) -> Result<Vec<QueuedJob>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let now = now_ms();
        if self.dialect == super::Dialect::Sqlite {
            // Look before taking the one write lock: the embedded api
            // publishes its submits itself, so the relay usually finds none.
            let due = sqlx::query("SELECT 1 AS due FROM outbox WHERE publish_at <= $1 LIMIT 1")
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
            if due.is_none() {
                return Ok(Vec::new());
            }
        }
        let mut tx = self.begin_write().await?;
        // Two statements: as one (`UPDATE .. WHERE job_id IN (SELECT ..)`)
        // Postgres plans a hash join over a scan of the whole outbox, dead
        // rows and all, on every call.
        // The tenant rides along for the queue's fair scheduling; a scalar
        // subquery, so the job rows are read but not locked.
        let due = sqlx::query(built(&format!(
            "SELECT job_id,
                    (SELECT tenant_id FROM jobs WHERE jobs.job_id = outbox.job_id) AS tenant_id
             FROM outbox WHERE publish_at <= $1
             ORDER BY publish_at LIMIT $2{}",
            self.dialect.skip_locked()
        )))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(QueuedJob {
                job_id: r.try_get("job_id")?,
                tenant_id: r
                    .try_get::<Option<String>, _>("tenant_id")?
                    .unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<QueuedJob>>>()?;
        if due.is_empty() {
            return Ok(due);
        }
        let sql = format!(
            "UPDATE outbox SET
                 publish_at = $1 + CASE WHEN republish_ms = 0 THEN $2 ELSE republish_ms END,
                 republish_ms = CASE WHEN republish_ms = 0 THEN $2
                                     WHEN republish_ms * 2 > $2 * 32 THEN $2 * 32
                                     ELSE republish_ms * 2 END
             WHERE job_id IN ({})",
            placeholders(3, due.len())
        );
        let mut query = sqlx::query(built(&sql)).bind(now).bind(republish_after_ms);
        for job in &due {
            query = query.bind(&job.job_id);
        }
        query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(due)
    }

    /// Makes every outbox row that was published due now, as if it never
    /// had been; returns how many. For a queue that starts empty (the
    /// in-process one). Rows not yet published keep their time (a retry's
    /// backoff).
    pub async fn make_outbox_due_now(&self) -> Result<u64> {
        let _turn = self.write_turn().await;
        let due = sqlx::query(
            "UPDATE outbox SET publish_at = $1, republish_ms = 0 WHERE republish_ms > 0",
        )
        .bind(now_ms())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(due)
    }

    /// Makes outbox rows due again (their publish failed).
    pub async fn retry_outbox_soon(&self, job_ids: &[String], at: i64) -> Result<()> {
        let _turn = self.write_turn().await;
        if job_ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "UPDATE outbox SET publish_at = $1 WHERE job_id IN ({})",
            placeholders(2, job_ids.len())
        );
        let mut query = sqlx::query(built(&sql)).bind(at);
        for job_id in job_ids {
            query = query.bind(job_id);
        }
        query.execute(&self.pool).await?;
        Ok(())
    }

    /// Claims the next attempt of a queued, due job. `None` when the job is
    /// not claimable: that delivery is a duplicate, a stale message, or for a
    /// cancelled or finished job (the guard against double runs).
    pub async fn claim_attempt(
        &self,
        job_id: &str,
        worker_id: &str,
        lease_until: i64,
    ) -> Result<Option<Claim>> {
        let mut claims = self
            .claim_attempts(&[job_id.to_owned()], worker_id, lease_until)
            .await?;
        Ok(claims.pop().flatten())
    }

    /// [`Store::claim_attempt`] for several deliveries in one transaction
    /// (group commit); the answer is in the order of `job_ids`. A job named
    /// twice is claimed once, by its first place in the list.
    pub async fn claim_attempts(
        &self,
        job_ids: &[String],
        worker_id: &str,
        lease_until: i64,
    ) -> Result<Vec<Option<Claim>>> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        // `status = 'QUEUED'` is the guard: of two deliveries of one job,
        // in this batch or in two processes, one finds it RUNNING.
        let claim = "UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1,
                 started_at = COALESCE(started_at, $1), lease_expires_at = $2, worker_id = $3
             WHERE job_id IN ({ids}) AND status = 'QUEUED' AND run_after <= $1
             RETURNING job_id, tenant_id, kind, params, attempts, handbacks, max_attempts";
        // On Postgres the IN list is padded to a size bucket (repeating the
        // last id, which changes nothing), so a connection prepares and
        // plans a few statements rather than one per batch size. SQLite
        // prepares in the process, cheaply: no gain was measured there
        // (embedded e2e, docs/performance.md).
        let listed = match self.dialect {
            super::Dialect::Postgres => padded_len(job_ids.len()),
            super::Dialect::Sqlite => job_ids.len(),
        };
        let ids = placeholders(4, listed);
        let padding = std::iter::repeat_n(&job_ids[job_ids.len() - 1], listed - job_ids.len());
        let rows = match self.dialect {
            // One statement, so one round trip and no BEGIN or COMMIT: the
            // claim and its outbox delete commit together all the same.
            super::Dialect::Postgres => {
                let sql = format!(
                    "WITH claimed AS ({}),
                     cleared AS (DELETE FROM outbox WHERE job_id IN ({ids})
                                 AND job_id IN (SELECT job_id FROM claimed))
                     SELECT * FROM claimed",
                    claim.replace("{ids}", &ids)
                );
                let mut query = sqlx::query(built(&sql))
                    .bind(now)
                    .bind(lease_until)
                    .bind(worker_id);
                for job_id in job_ids.iter().chain(padding) {
                    query = query.bind(job_id);
                }
                query.fetch_all(&self.pool).await?
            }
            super::Dialect::Sqlite => {
                let mut tx = self.begin_write().await?;
                let mut query = sqlx::query(built(&claim.replace("{ids}", &ids)))
                    .bind(now)
                    .bind(lease_until)
                    .bind(worker_id);
                for job_id in job_ids.iter().chain(padding) {
                    query = query.bind(job_id);
                }
                let rows = query.fetch_all(&mut *tx).await?;
                let claimed: Vec<String> = rows
                    .iter()
                    .map(|row| Ok(row.try_get("job_id")?))
                    .collect::<Result<_>>()?;
                if !claimed.is_empty() {
                    let sql = format!(
                        "DELETE FROM outbox WHERE job_id IN ({})",
                        placeholders(1, claimed.len())
                    );
                    let mut query = sqlx::query(built(&sql));
                    for job_id in &claimed {
                        query = query.bind(job_id);
                    }
                    query.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                rows
            }
        };
        let mut claims = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let claim = claim_from_row(row)?;
            claims.insert(claim.job_id.clone(), claim);
        }
        Ok(job_ids.iter().map(|id| claims.remove(id)).collect())
    }

    /// The running attempt of the job if `worker_id` holds it: a claim
    /// whose commit went through although its caller saw an error.
    pub async fn attempt_held_by(&self, job_id: &str, worker_id: &str) -> Result<Option<Claim>> {
        let row = sqlx::query(
            "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts FROM jobs
             WHERE job_id = $1 AND status = 'RUNNING' AND worker_id = $2",
        )
        .bind(job_id)
        .bind(worker_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(claim_from_row).transpose()
    }

    /// Extends the attempt's lease and reads whether a cancel was asked.
    pub async fn heartbeat(
        &self,
        job_id: &str,
        attempt: i64,
        lease_until: i64,
    ) -> Result<LeaseCheck> {
        let _turn = self.write_turn().await;
        let row = sqlx::query(
            "UPDATE jobs SET lease_expires_at = $3
             WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
             RETURNING cancel_requested",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(lease_until)
        .fetch_optional(&self.pool)
        .await?;
        lease_check(row)
    }

    /// Records progress, fenced like every write of an attempt.
    pub async fn set_progress(
        &self,
        job_id: &str,
        attempt: i64,
        progress: f64,
    ) -> Result<LeaseCheck> {
        let _turn = self.write_turn().await;
        let row = sqlx::query(
            "UPDATE jobs SET progress = $3
             WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
             RETURNING cancel_requested",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(progress.clamp(0.0, 1.0))
        .fetch_optional(&self.pool)
        .await?;
        lease_check(row)
    }

    /// Ends an attempt: status, result or error, and a retry's outbox row,
    /// in one transaction that applies only while `attempt` is the current
    /// attempt and still running. Returns whether it applied: `false` is a
    /// stale or duplicate attempt, whose outcome is dropped (the fence).
    pub async fn finish_attempt(
        &self,
        job_id: &str,
        attempt: i64,
        outcome: &AttemptOutcome,
    ) -> Result<bool> {
        let (status, run_after, error) = match outcome {
            AttemptOutcome::Succeeded { .. } | AttemptOutcome::SucceededInChunks { .. } => {
                let body = match outcome {
                    AttemptOutcome::SucceededInChunks { chunks } => ResultBody::Chunks(*chunks),
                    AttemptOutcome::Succeeded { result } => ResultBody::Document(result.clone()),
                    _ => unreachable!("matched above"),
                };
                let mut applied = self
                    .finish_succeeded(&[(job_id.to_owned(), attempt, body)])
                    .await?;
                return Ok(applied.pop() == Some(true));
            }
            AttemptOutcome::Failed { error } => (JobStatus::Failed, None, Some(error)),
            AttemptOutcome::RetryAt { at, error } => (JobStatus::Queued, Some(*at), Some(error)),
            AttemptOutcome::Cancelled => (JobStatus::Cancelled, None, None),
        };
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        if let AttemptOutcome::RetryAt { .. } = outcome {
            // A cancel asked while this attempt ran wins over its retry: the
            // client asked the job to stop, and it has stopped.
            let cancelled = sqlx::query(
                "UPDATE jobs SET status = 'CANCELLED', finished_at = $3, lease_expires_at = NULL,
                     worker_id = NULL, cancel_requested = 0
                 WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING' AND cancel_requested = 1",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if cancelled {
                discard_all_chunks(&mut tx, job_id).await?;
                self.announce_final(&mut tx, job_id).await?;
                tx.commit().await?;
                return Ok(true);
            }
        }
        let finished_at = status.is_final().then_some(now);
        // No float parameter: sqlx 0.9.0's Any driver binds a NULL f64 as a
        // float4, and Postgres caches that type with the statement, so a
        // later non-NULL f64 on the same connection is refused.
        let applied = sqlx::query(
            "UPDATE jobs SET status = $3, finished_at = $4, run_after = COALESCE($5, run_after),
                 error_type = $6, error_message = $7,
                 lease_expires_at = NULL, worker_id = NULL,
                 cancel_requested = CASE WHEN $3 = 'QUEUED' THEN cancel_requested ELSE 0 END
             WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(status.as_str())
        .bind(finished_at)
        .bind(run_after)
        .bind(error.map(|e| e.error_type.as_str()))
        .bind(error.map(|e| e.message.as_str()))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !applied {
            return Ok(false);
        }
        if let AttemptOutcome::RetryAt { at, .. } = outcome {
            upsert_outbox(&mut tx, job_id, *at).await?;
        }
        if status.is_final() {
            // No attempt follows to clear them: an attempt that ends the
            // job without a result takes its chunks with it. (A retry's are
            // cleared by the next attempt, see `discard_chunks_before`.)
            discard_all_chunks(&mut tx, job_id).await?;
            self.announce_final(&mut tx, job_id).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Ends successful attempts, each `(job_id, attempt, result)`, in one
    /// transaction (group commit): status, result and announcement, for
    /// each only while its attempt is the current one and still running.
    /// Answers in input order whether each applied (`false`: a stale or
    /// duplicate attempt, whose result is dropped: the fence).
    pub async fn finish_succeeded(
        &self,
        attempts: &[(String, i64, ResultBody)],
    ) -> Result<Vec<bool>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        // Keyed by attempt too: a stale attempt of a job may end in the
        // same batch as the current one.
        let applied = match self.dialect {
            super::Dialect::Postgres => succeed_in_one_statement(&mut tx, attempts).await?,
            super::Dialect::Sqlite => succeed_in_statements(&mut tx, attempts).await?,
        };
        let finished: Vec<String> = attempts
            .iter()
            .filter(|(job_id, attempt, _)| applied.contains(&(job_id.clone(), *attempt)))
            .map(|(job_id, ..)| job_id.clone())
            .collect();
        if !finished.is_empty() {
            // Webhooks are read in a statement of their own, after the
            // update holds the jobs' rows: a webhook registered for one of
            // them meanwhile is committed by then (its registration locks
            // the job), or waits and sees the job final.
            match self.dialect {
                // The statement sent the NOTIFY.
                super::Dialect::Postgres => self.create_events(&mut tx, &finished).await?,
                super::Dialect::Sqlite => self.announce_final_all(&mut tx, &finished).await?,
            }
        }
        tx.commit().await?;
        Ok(answer_in_order(attempts, &applied))
    }

    /// [`Store::finish_succeeded`] for a group commit whose writes must not
    /// fail one another: when the group's transaction fails for anything
    /// but an outage (a result the database refuses, say), each write is
    /// tried again in a transaction of its own, so only the refused one
    /// fails. Answers in input order.
    pub async fn finish_succeeded_each(
        &self,
        attempts: &[(String, i64, ResultBody)],
    ) -> Result<Vec<Result<bool>>> {
        match self.finish_succeeded(attempts).await {
            Ok(applied) => Ok(applied.into_iter().map(Ok).collect()),
            Err(error) if attempts.len() > 1 && !error.is_unavailable() => {
                tracing::warn!(%error, writes = attempts.len(), "a group commit of successes failed; writing each alone");
                let mut answers = Vec::with_capacity(attempts.len());
                for attempt in attempts {
                    let applied = self.finish_succeeded(std::slice::from_ref(attempt)).await;
                    answers.push(applied.map(|applied| applied.first() == Some(&true)));
                }
                Ok(answers)
            }
            Err(error) => Err(error),
        }
    }

    /// Running jobs whose lease lapsed (their worker died or hung): back to
    /// the queue as a new attempt, or `FAILED` once attempts are used up.
    /// Returns the jobs that reached a final status.
    pub async fn requeue_lapsed_leases(&self, limit: i64) -> Result<(usize, Vec<String>)> {
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query(built(&format!(
            "SELECT job_id, attempts - handbacks AS counted, max_attempts,
                 CASE WHEN {SAGA_UNFINISHED} THEN 1 ELSE 0 END AS saga_unfinished
             FROM jobs
             WHERE status = 'RUNNING' AND lease_expires_at < $1
             ORDER BY lease_expires_at LIMIT $2{}",
            self.dialect.skip_locked()
        )))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut requeued = 0;
        let mut failed = Vec::new();
        for row in &rows {
            let job_id: String = row.try_get("job_id")?;
            let attempts: i64 = row.try_get("counted")?;
            let max_attempts: i64 = row.try_get("max_attempts")?;
            let message = format!("attempt {attempts} stopped responding: its lease lapsed");
            // A saga with steps to run or undo is never failed here: its
            // next attempt compensates first (`docs/sagas.md`).
            let saga_unfinished = row.try_get::<i64, _>("saga_unfinished")? == 1;
            if attempts < max_attempts || saga_unfinished {
                sqlx::query(
                    "UPDATE jobs SET status = 'QUEUED', run_after = $2, lease_expires_at = NULL,
                         worker_id = NULL, error_type = 'lease_expired', error_message = $3
                     WHERE job_id = $1",
                )
                .bind(&job_id)
                .bind(now)
                .bind(&message)
                .execute(&mut *tx)
                .await?;
                upsert_outbox(&mut tx, &job_id, now).await?;
                requeued += 1;
            } else {
                sqlx::query(
                    "UPDATE jobs SET status = 'FAILED', finished_at = $2, lease_expires_at = NULL,
                         worker_id = NULL, error_type = 'lease_expired', error_message = $3,
                         cancel_requested = 0
                     WHERE job_id = $1",
                )
                .bind(&job_id)
                .bind(now)
                .bind(&message)
                .execute(&mut *tx)
                .await?;
                discard_all_chunks(&mut tx, &job_id).await?;
                self.announce_final(&mut tx, &job_id).await?;
                failed.push(job_id);
            }
        }
        tx.commit().await?;
        Ok((requeued, failed))
    }

    /// Hands this worker's running attempts back to the queue at once (on a
    /// shutdown whose grace ran out), so another worker need not wait for
    /// their leases to lapse. Each is fenced by its attempt. A hand-back
    /// does not count against the attempt limit (the job did not fail, the
    /// process was stopped), but the fencing token keeps growing, so the
    /// handed-back attempt can write nothing after this.
    pub async fn release_attempts(&self, attempts: &[(String, i64)]) -> Result<usize> {
        let now = now_ms();
        let mut released = 0;
        for (job_id, attempt) in attempts {
            let mut tx = self.begin_write().await?;
            let done = sqlx::query(
                "UPDATE jobs SET status = 'QUEUED', run_after = $3, lease_expires_at = NULL,
                     worker_id = NULL, handbacks = handbacks + 1, error_type = 'shutdown',
                     error_message = 'the worker shut down before the attempt finished'
                 WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if done {
                upsert_outbox(&mut tx, job_id, now).await?;
                released += 1;
            }
            tx.commit().await?;
        }
        Ok(released)
    }

    /// Forces the lease of a running attempt to lapse now: for tests of the
    /// sweeper and of fencing.
    #[cfg(feature = "test-hooks")]
    pub async fn expire_lease_now(&self, job_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE jobs SET lease_expires_at = $2 WHERE job_id = $1")
            .bind(job_id)
            .bind(now_ms() - 1)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// How many results the job has stored (0 or 1).
    #[cfg(feature = "test-hooks")]
    pub async fn count_results(&self, job_id: &str) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM job_results WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }
}

/// Sets the batch's running attempts `SUCCEEDED` and stores their results,
/// one statement each; returns the attempts that applied.
async fn succeed_in_statements(
    tx: &mut WriteTx,
    attempts: &[(String, i64, ResultBody)],
) -> Result<std::collections::HashSet<(String, i64)>> {
    let sql = format!(
        "UPDATE jobs SET status = 'SUCCEEDED', finished_at = $1, progress = 1.0,
                 error_type = NULL, error_message = NULL, lease_expires_at = NULL,
                 worker_id = NULL, cancel_requested = 0
             WHERE status = 'RUNNING' AND ({})
             RETURNING job_id, attempts",
        pairs_equal(2, attempts.len(), "job_id", "attempts")
    );
    let mut query = sqlx::query(built(&sql)).bind(now_ms());
    for (job_id, attempt, _) in attempts {
        query = query.bind(job_id).bind(*attempt);
    }
    // Keyed by attempt too: a stale attempt of a job may end in the
    // same batch as the current one.
    let applied: std::collections::HashSet<(String, i64)> = query
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("job_id")?, row.try_get("attempts")?)))
        .collect::<Result<_>>()?;
    let results: Vec<&(String, i64, ResultBody)> = attempts
        .iter()
        .filter(|(job_id, attempt, _)| applied.contains(&(job_id.clone(), *attempt)))
        .collect();
    if !results.is_empty() {
        // The fence above lets one attempt per job get here, so each
        // result is written once; the conflict clause is a second guard
        // for a row left by an interrupted earlier write. A chunked
        // result is named by its attempt: chunks of any other attempt
        // are never served.
        let sql = format!(
            "INSERT INTO job_results (job_id, body, chunk_attempt, chunk_count) VALUES {}
                 ON CONFLICT (job_id) DO UPDATE SET body = excluded.body,
                     chunk_attempt = excluded.chunk_attempt, chunk_count = excluded.chunk_count",
            value_rows(1, results.len(), 4)
        );
        let mut query = sqlx::query(built(&sql));
        for (job_id, attempt, result) in &results {
            query = match result {
                ResultBody::Document(body) => query
                    .bind(job_id)
                    .bind(body.as_str())
                    .bind(None::<i64>)
                    .bind(None::<i64>),
                ResultBody::Chunks(count) => query
                    .bind(job_id)
                    .bind("")
                    .bind(Some(*attempt))
                    .bind(Some(*count)),
            };
        }
        query.execute(&mut **tx).await?;
    }
    Ok(applied)
}

/// [`succeed_in_statements`] on Postgres as one statement, which also sends
/// the batch's NOTIFY (delivered at commit): one round trip where there
/// were three. The `IN` list and `VALUES` are padded like the claim's: the
/// last pair repeated (no change), result rows of NULLs (they join nothing).
async fn succeed_in_one_statement(
    tx: &mut WriteTx,
    attempts: &[(String, i64, ResultBody)],
) -> Result<std::collections::HashSet<(String, i64)>> {
    let listed = padded_len(attempts.len());
    let pairs = pairs_equal(3, listed, "job_id", "attempts");
    let first_result = 3 + 2 * listed;
    let results = (0..listed)
        .map(|row| {
            let n = first_result + 5 * row;
            format!(
                "(${n}::text, ${}::bigint, ${}::text, ${}::bigint, ${}::bigint)",
                n + 1,
                n + 2,
                n + 3,
                n + 4
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    // The result insert joins the update's rows: only an attempt that
    // applied stores its result (the fence), as in the statements above.
    let sql = format!(
        "WITH done AS (
             UPDATE jobs SET status = 'SUCCEEDED', finished_at = $1, progress = 1.0,
                 error_type = NULL, error_message = NULL, lease_expires_at = NULL,
                 worker_id = NULL, cancel_requested = 0
             WHERE status = 'RUNNING' AND ({pairs})
             RETURNING job_id, attempts
         ), stored AS (
             INSERT INTO job_results (job_id, body, chunk_attempt, chunk_count)
             SELECT r.job_id, r.body, r.chunk_attempt, r.chunk_count
             FROM (VALUES {results}) AS r (job_id, attempt, body, chunk_attempt, chunk_count)
             JOIN done ON done.job_id = r.job_id AND done.attempts = r.attempt
             ON CONFLICT (job_id) DO UPDATE SET body = excluded.body,
                 chunk_attempt = excluded.chunk_attempt, chunk_count = excluded.chunk_count
         ), notified AS (
             SELECT pg_notify($2, string_agg(job_id, ',')) FROM done HAVING COUNT(*) > 0
         )
         SELECT done.job_id, done.attempts FROM done LEFT JOIN notified ON true"
    );
    let last = &attempts[attempts.len() - 1];
    let padding = std::iter::repeat_n(last, listed - attempts.len());
    let mut query = sqlx::query(built(&sql))
        .bind(now_ms())
        .bind(super::FINISHED_CHANNEL);
    for (job_id, attempt, _) in attempts.iter().chain(padding) {
        query = query.bind(job_id).bind(*attempt);
    }
    for (job_id, attempt, result) in attempts {
        query = match result {
            ResultBody::Document(body) => query
                .bind(job_id)
                .bind(*attempt)
                .bind(body.as_str())
                .bind(None::<i64>)
                .bind(None::<i64>),
            ResultBody::Chunks(count) => query
                .bind(job_id)
                .bind(*attempt)
                .bind("")
                .bind(Some(*attempt))
                .bind(Some(*count)),
        };
    }
    for _ in attempts.len()..listed {
        query = query
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<i64>);
    }
    query
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|row| Ok((row.try_get("job_id")?, row.try_get("attempts")?)))
        .collect()
}

/// For each of `attempts`, in order, whether it applied.
fn answer_in_order(
    attempts: &[(String, i64, ResultBody)],
    applied: &std::collections::HashSet<(String, i64)>,
) -> Vec<bool> {
    attempts
        .iter()
        .map(|(job_id, attempt, _)| applied.contains(&(job_id.clone(), *attempt)))
        .collect()
}

async fn upsert_outbox(tx: &mut WriteTx, job_id: &str, publish_at: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO outbox (job_id, publish_at) VALUES ($1, $2)
         ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at, republish_ms = 0",
    )
    .bind(job_id)
    .bind(publish_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn delete_outbox(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    sqlx::query("DELETE FROM outbox WHERE job_id = $1")
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
