//! Attempts: the claim, heartbeats and progress, the end of an attempt,
//! its hand-back at a shutdown, and the sweeper of lapsed leases.
//!
//! The fencing token of an attempt is the job's `attempts` value when it was
//! claimed: every write an attempt makes is conditional on it, so a stale or
//! duplicated attempt changes nothing.

use sqlx::{Row, any::AnyRow};

use super::{
    Store, WriteTx, built, outbox::upsert_outbox, padded_len, pairs_equal, placeholders,
    results::discard_all_chunks, sagas::SAGA_UNFINISHED, value_rows,
};
use crate::Result;
use shared::{
    model::{AttemptOutcome, JobStatus, ResultBody},
    time::now_ms,
};

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

impl Store {
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
        let rows = match self.dialect {
            // One call of `claim_jobs` (its migration says why a function):
            // the claim and its outbox delete commit together, with no BEGIN
            // or COMMIT. The list is padded to a size bucket (repeating the
            // last id, which changes nothing), so a connection prepares a
            // few statements rather than one per batch size.
            super::Dialect::Postgres => {
                let listed = padded_len(job_ids.len());
                let padding =
                    std::iter::repeat_n(&job_ids[job_ids.len() - 1], listed - job_ids.len());
                let sql = format!(
                    "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts
                     FROM claim_jobs(ARRAY[{}], $1, $2, $3, $4, $5)",
                    placeholders(6, listed)
                );
                let mut query = sqlx::query(built(&sql))
                    .bind(now)
                    .bind(lease_until)
                    .bind(worker_id)
                    .bind(JobStatus::Running.as_str())
                    .bind(JobStatus::Queued.as_str());
                for job_id in job_ids.iter().chain(padding) {
                    query = query.bind(job_id);
                }
                query.fetch_all(&self.pool).await?
            }
            super::Dialect::Sqlite => {
                // Requiring QUEUED is the guard: of two deliveries of one
                // job, in this batch or in two processes, one finds it
                // RUNNING (as in `claim_jobs`).
                let claim = format!(
                    "UPDATE jobs SET status = $4, attempts = attempts + 1,
                         started_at = COALESCE(started_at, $1), lease_expires_at = $2,
                         worker_id = $3
                     WHERE job_id IN ({}) AND status = $5 AND run_after <= $1
                     RETURNING job_id, tenant_id, kind, params, attempts, handbacks, max_attempts",
                    placeholders(6, job_ids.len())
                );
                let mut tx = self.begin_write().await?;
                let mut query = sqlx::query(built(&claim))
                    .bind(now)
                    .bind(lease_until)
                    .bind(worker_id)
                    .bind(JobStatus::Running.as_str())
                    .bind(JobStatus::Queued.as_str());
                for job_id in job_ids {
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
             WHERE job_id = $1 AND status = $3 AND worker_id = $2",
        )
        .bind(job_id)
        .bind(worker_id)
        .bind(JobStatus::Running.as_str())
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
             WHERE job_id = $1 AND attempts = $2 AND status = $4
             RETURNING cancel_requested",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(lease_until)
        .bind(JobStatus::Running.as_str())
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
             WHERE job_id = $1 AND attempts = $2 AND status = $4
             RETURNING cancel_requested",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(progress.clamp(0.0, 1.0))
        .bind(JobStatus::Running.as_str())
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
                "UPDATE jobs SET status = $4, finished_at = $3, lease_expires_at = NULL,
                     worker_id = NULL, cancel_requested = 0
                 WHERE job_id = $1 AND attempts = $2 AND status = $5 AND cancel_requested = 1",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(now)
            .bind(JobStatus::Cancelled.as_str())
            .bind(JobStatus::Running.as_str())
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
                 cancel_requested = CASE WHEN $3 = $8 THEN cancel_requested ELSE 0 END
             WHERE job_id = $1 AND attempts = $2 AND status = $9",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(status.as_str())
        .bind(finished_at)
        .bind(run_after)
        .bind(error.map(|e| e.error_type.as_str()))
        .bind(error.map(|e| e.message.as_str()))
        .bind(JobStatus::Queued.as_str())
        .bind(JobStatus::Running.as_str())
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
        // 'RUNNING' stays a literal: only it matches the partial index jobs_running_leases.
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
                    "UPDATE jobs SET status = $4, run_after = $2, lease_expires_at = NULL,
                         worker_id = NULL, error_type = 'lease_expired', error_message = $3
                     WHERE job_id = $1",
                )
                .bind(&job_id)
                .bind(now)
                .bind(&message)
                .bind(JobStatus::Queued.as_str())
                .execute(&mut *tx)
                .await?;
                upsert_outbox(&mut tx, &job_id, now).await?;
                requeued += 1;
            } else {
                sqlx::query(
                    "UPDATE jobs SET status = $4, finished_at = $2, lease_expires_at = NULL,
                         worker_id = NULL, error_type = 'lease_expired', error_message = $3,
                         cancel_requested = 0
                     WHERE job_id = $1",
                )
                .bind(&job_id)
                .bind(now)
                .bind(&message)
                .bind(JobStatus::Failed.as_str())
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
                "UPDATE jobs SET status = $4, run_after = $3, lease_expires_at = NULL,
                     worker_id = NULL, handbacks = handbacks + 1, error_type = 'shutdown',
                     error_message = 'the worker shut down before the attempt finished'
                 WHERE job_id = $1 AND attempts = $2 AND status = $5",
            )
            .bind(job_id)
            .bind(attempt)
            .bind(now)
            .bind(JobStatus::Queued.as_str())
            .bind(JobStatus::Running.as_str())
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
}

/// Sets the batch's running attempts `SUCCEEDED` and stores their results,
/// one statement each; returns the attempts that applied.
async fn succeed_in_statements(
    tx: &mut WriteTx,
    attempts: &[(String, i64, ResultBody)],
) -> Result<std::collections::HashSet<(String, i64)>> {
    let sql = format!(
        "UPDATE jobs SET status = $2, finished_at = $1, progress = 1.0,
                 error_type = NULL, error_message = NULL, lease_expires_at = NULL,
                 worker_id = NULL, cancel_requested = 0
             WHERE status = $3 AND ({})
             RETURNING job_id, attempts",
        pairs_equal(4, attempts.len(), "job_id", "attempts")
    );
    let mut query = sqlx::query(built(&sql))
        .bind(now_ms())
        .bind(JobStatus::Succeeded.as_str())
        .bind(JobStatus::Running.as_str());
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
    let pairs = pairs_equal(5, listed, "job_id", "attempts");
    let first_result = 5 + 2 * listed;
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
             UPDATE jobs SET status = $3, finished_at = $1, progress = 1.0,
                 error_type = NULL, error_message = NULL, lease_expires_at = NULL,
                 worker_id = NULL, cancel_requested = 0
             WHERE status = $4 AND ({pairs})
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
        .bind(super::FINISHED_CHANNEL)
        .bind(JobStatus::Succeeded.as_str())
        .bind(JobStatus::Running.as_str());
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
