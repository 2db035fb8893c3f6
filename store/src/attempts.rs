//! Attempts: the claim, heartbeats and progress, the end of an attempt,
//! its hand-back at a shutdown, and the sweeper of lapsed leases.
//!
//! The fencing token of an attempt is the job's `attempts` value when it was
//! claimed: every write an attempt makes is conditional on it, so a stale or
//! duplicated attempt changes nothing.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use shared::{
    model::{AttemptOutcome, Cap, JobStatus, ResultBody},
    settings::Caps,
    time::now_ms,
};

use crate::{
    Error, Result, Store, on_pool, on_postgres, on_tx, outbox::queue_again, postgres,
    results::discard_all_chunks, sql::Millis, sqlite,
};

pub(crate) use crate::rows::attempts::{AttemptEnd, ClaimRow, Success};

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
    /// When the job was made (unix ms).
    pub created_at: i64,
    /// The W3C `traceparent` the job keeps: its submit's, if traced.
    pub traceparent: Option<String>,
}

impl Claim {
    /// The job's attempts handed back so far, not counted against its limit.
    pub fn handbacks(&self) -> i64 {
        self.attempt - self.counted_attempt
    }
}

/// A successful attempt's write: its result, and the W3C `traceparent` of
/// the span that writes it, which the job's webhook events keep.
#[derive(Debug, Clone)]
pub struct SuccessWrite {
    pub job_id: String,
    pub attempt: i64,
    pub result: ResultBody,
    pub traceparent: Option<String>,
}

impl SuccessWrite {
    /// A write without a trace.
    pub fn new(job_id: impl Into<String>, attempt: i64, result: ResultBody) -> Self {
        SuccessWrite {
            job_id: job_id.into(),
            attempt,
            result,
            traceparent: None,
        }
    }
}

impl From<ClaimRow> for Claim {
    fn from(row: ClaimRow) -> Self {
        Claim {
            job_id: row.job_id,
            tenant_id: row.tenant_id,
            kind: row.kind,
            params: row.params.into(),
            attempt: row.attempts,
            counted_attempt: row.attempts - row.handbacks,
            max_attempts: row.max_attempts,
            created_at: row.created_at.0,
            traceparent: row.traceparent,
        }
    }
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

/// What a fenced `... RETURNING cancel_requested` found: no row means the
/// attempt is no longer the current one.
fn lease_check(cancel_requested: Option<bool>) -> LeaseCheck {
    match cancel_requested {
        Some(cancel_requested) => LeaseCheck::Held { cancel_requested },
        None => LeaseCheck::Lost,
    }
}

/// Attempts of a job handed back because their lease was never taken up,
/// at most: after that, a lease that lapses untaken counts as an attempt.
const MOST_UNTAKEN_HANDBACKS: i64 = 3;

/// Jobs woken by one look of [`Store::wake_parked`] at most, per cap
/// without a limit (a cap that was removed).
const WAKE_UNCAPPED: i64 = 1_000;

impl Store {
    /// Whether a worker pool writes its claims and its successes as one
    /// stream of group commits ([`Store::claim_and_finish_succeeded`]:
    /// one statement on Postgres, one transaction on SQLite, whose one
    /// writer would otherwise take a turn for each) or each kind apart.
    /// Apart on Postgres under caps (a capped claim is a function of its
    /// own), and where the job rows are the queue
    /// ([`Store::queue_in_job_rows`]), its fetches statements of this
    /// same database: there a slot waits on Postgres three times a job,
    /// and one stream of writes for both kinds kept slots waiting longer
    /// than the commits it saved.
    pub fn claims_commit_with_successes(&self, caps: &Caps) -> bool {
        match self.dialect() {
            crate::Dialect::Postgres => caps.is_none() && !self.queue_in_job_rows(),
            crate::Dialect::Sqlite => true,
        }
    }

    /// Claims the next attempt of each queued, due job of `job_ids`, in one
    /// transaction (group commit); the answer is in the order of
    /// `job_ids`, `None` where the job is not claimable: that delivery is
    /// a duplicate, a stale message, or for a cancelled or finished job
    /// (the guard against double runs). A job named twice is claimed once,
    /// by its first place in the list.
    ///
    /// Under `caps`, a job whose tenant (or tenant and kind) already runs
    /// its cap is not claimed but parked: it stays QUEUED, out of the
    /// queue, until a job of its tenant stops running (the wake trigger
    /// on `jobs`) or [`Store::wake_parked`] finds room for it.
    pub async fn claim_attempts(
        &self,
        job_ids: &[String],
        worker_id: &str,
        lease_until: i64,
        caps: &Caps,
    ) -> Result<Vec<Option<Claim>>> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        let (now, lease_until) = (Millis(now_ms()), Millis(lease_until));
        let rows = match &self.db {
            // One call of `claim_jobs` (its migration says why a function):
            // the claim and its outbox delete commit together, with no BEGIN
            // or COMMIT.
            crate::Db::Postgres(pool) => on_postgres!(self, self.per_job_pool(pool), pool =>
                postgres::attempts::claim(pool, job_ids, now, lease_until, worker_id, caps).await?
            ),
            crate::Db::Sqlite(_) => {
                let mut tx = self.begin_write().await?;
                let rows = claim_in(&mut tx, job_ids, now, lease_until, worker_id, caps).await?;
                tx.commit().await?;
                rows
            }
        };
        Ok(in_claim_order(job_ids, rows))
    }

    /// A worker's claims and successes waiting at one moment: on Postgres
    /// without caps, one statement for both (`claim_and_succeed`), one
    /// commit where there would be two; on SQLite, one transaction (one
    /// turn of its writer); with caps on Postgres, or for a list alone, as
    /// [`Store::claim_attempts`] and [`Store::finish_succeeded_each`]. Each
    /// answers as those would. A statement or transaction that fails on an
    /// error other than an outage is followed by each list on its own, so
    /// that a write the database refuses fails nothing else.
    pub async fn claim_and_finish_succeeded(
        &self,
        job_ids: &[String],
        worker_id: &str,
        lease_until: i64,
        caps: &Caps,
        successes: &[SuccessWrite],
    ) -> (Result<Vec<Option<Claim>>>, Result<Vec<Result<bool>>>) {
        let separately = async || {
            let claimed = match job_ids {
                [] => Ok(Vec::new()),
                _ => {
                    self.claim_attempts(job_ids, worker_id, lease_until, caps)
                        .await
                }
            };
            let succeeded = match successes {
                [] => Ok(Vec::new()),
                _ => self.finish_succeeded_each(successes).await,
            };
            (claimed, succeeded)
        };
        // An outage fails every write; anything else, only what the
        // database refuses when each list is written on its own.
        let after_failure = async |error: Error| {
            if error.is_unavailable() {
                let error = Arc::new(error);
                return (Err(Error::Batch(error.clone())), Err(Error::Batch(error)));
            }
            tracing::warn!(%error, "a group commit of claims and successes failed; writing each list alone");
            separately().await
        };
        if job_ids.is_empty() || successes.is_empty() {
            return separately().await;
        }
        let crate::Db::Postgres(pool) = &self.db else {
            return match self
                .claim_and_succeed_in_one_transaction(
                    job_ids,
                    worker_id,
                    Millis(lease_until),
                    caps,
                    successes,
                )
                .await
            {
                Ok((claimed, succeeded)) => {
                    (Ok(claimed), Ok(succeeded.into_iter().map(Ok).collect()))
                }
                Err(error) => after_failure(error).await,
            };
        };
        if !caps.is_none() {
            return separately().await;
        }
        let now = Millis(now_ms());
        let claims = postgres::attempts::SlotClaims {
            job_ids,
            lease_until: Millis(lease_until),
            worker_id,
        };
        let successes_written = successes_of(successes);
        let written = async {
            Ok::<_, Error>(on_postgres!(self, self.per_job_pool(pool), pool =>
                postgres::attempts::claim_and_succeed(pool, &claims, &successes_written, now, true)
                    .await?
            ))
        };
        let writes = match written.await {
            Ok(writes) => writes,
            Err(error) => return after_failure(error).await,
        };
        let ended: HashSet<(String, i64)> = writes.ended.into_iter().collect();
        let ends = |write: &SuccessWrite| ended.contains(&(write.job_id.clone(), write.attempt));
        // Jobs a webhook may watch: their events are written in a
        // transaction of their own.
        let rest: Vec<SuccessWrite> = successes
            .iter()
            .filter(|write| !ends(write))
            .cloned()
            .collect();
        let succeeded = self
            .each_alone_if_refused(&rest, Some(now))
            .await
            .map(|rest_applied| {
                let mut rest_applied = rest_applied.into_iter();
                successes
                    .iter()
                    .map(|write| match ends(write) {
                        true => Ok(true),
                        false => rest_applied.next().unwrap_or(Ok(false)),
                    })
                    .collect()
            });
        (Ok(in_claim_order(job_ids, writes.claimed)), succeeded)
    }

    /// The running attempt of the job if `worker_id` holds it: a claim
    /// whose commit went through although its caller saw an error.
    pub async fn attempt_held_by(&self, job_id: &str, worker_id: &str) -> Result<Option<Claim>> {
        let row = on_pool!(self,
            pool => postgres::attempts::held_by(pool, job_id, worker_id).await?,
            pool => sqlite::attempts::held_by(pool, job_id, worker_id).await?,
        );
        Ok(row.map(Claim::from))
    }

    /// Every running attempt `worker_id` holds (see
    /// [`Store::attempt_held_by`]).
    pub async fn attempts_held_by(&self, worker_id: &str) -> Result<Vec<Claim>> {
        let rows = on_pool!(self,
            pool => postgres::attempts::all_held_by(pool, worker_id).await?,
            pool => sqlite::attempts::all_held_by(pool, worker_id).await?,
        );
        Ok(rows.into_iter().map(Claim::from).collect())
    }

    /// Extends the attempt's lease and reads whether a cancel was asked.
    pub async fn heartbeat(
        &self,
        job_id: &str,
        attempt: i64,
        lease_until: i64,
    ) -> Result<LeaseCheck> {
        let _turn = self.write_turn().await;
        let lease_until = Millis(lease_until);
        Ok(lease_check(on_pool!(self,
            pool => postgres::attempts::heartbeat(pool, job_id, attempt, lease_until).await?,
            pool => sqlite::attempts::heartbeat(pool, job_id, attempt, lease_until).await?,
        )))
    }

    /// Records progress, fenced like every write of an attempt.
    pub async fn set_progress(
        &self,
        job_id: &str,
        attempt: i64,
        progress: f64,
    ) -> Result<LeaseCheck> {
        let _turn = self.write_turn().await;
        let progress = progress.clamp(0.0, 1.0);
        let written = on_pool!(self,
            pool => postgres::attempts::set_progress(pool, job_id, attempt, progress).await,
            pool => sqlite::attempts::set_progress(pool, job_id, attempt, progress).await,
        );
        let written =
            crate::lose_answer("store::progress_answer_lost", written.map_err(Error::from));
        Ok(lease_check(written?))
    }

    /// Ends an attempt without a result: a final failure, a retry's
    /// backoff (with its outbox row; a hand-back's is not counted), or a
    /// cancellation, in one
    /// transaction that applies only while `attempt` is the current
    /// attempt and still running. Returns whether it applied: `false` is
    /// a stale or duplicate attempt, whose outcome is dropped (the fence).
    /// Successes end through [`Store::finish_succeeded`], the group commit
    /// of results, and are refused here. `traceparent` names the span of
    /// this write, whose trace the job's webhook deliveries join.
    pub async fn finish_attempt(
        &self,
        job_id: &str,
        attempt: i64,
        outcome: &AttemptOutcome,
        traceparent: Option<&str>,
    ) -> Result<bool> {
        let now = now_ms();
        let end = match outcome {
            AttemptOutcome::Succeeded { .. } | AttemptOutcome::SucceededInChunks { .. } => {
                return Err(Error::Corrupt(
                    "a success ends through finish_succeeded, which stores its result".into(),
                ));
            }
            AttemptOutcome::Failed { error } => AttemptEnd {
                status: JobStatus::Failed,
                finished_at: Some(Millis(now)),
                run_after: None,
                error: Some(error),
                handed_back: false,
            },
            AttemptOutcome::RetryAt { at, error } => AttemptEnd {
                status: JobStatus::Queued,
                finished_at: None,
                run_after: Some(Millis(*at)),
                error: Some(error),
                handed_back: false,
            },
            AttemptOutcome::HandBack { at, error } => AttemptEnd {
                status: JobStatus::Queued,
                finished_at: None,
                run_after: Some(Millis(*at)),
                error: Some(error),
                handed_back: true,
            },
            AttemptOutcome::Cancelled => AttemptEnd {
                status: JobStatus::Cancelled,
                finished_at: Some(Millis(now)),
                run_after: None,
                error: None,
                handed_back: false,
            },
        };
        let mut tx = self.begin_write().await?;
        if let AttemptOutcome::RetryAt { .. } | AttemptOutcome::HandBack { .. } = outcome {
            // A cancel asked while this attempt ran wins over its retry: the
            // client asked the job to stop, and it has stopped.
            let cancelled = on_tx!(tx,
                conn => postgres::attempts::cancel_if_asked(conn, job_id, attempt, Millis(now)).await?,
                conn => sqlite::attempts::cancel_if_asked(conn, job_id, attempt, Millis(now)).await?,
            );
            if cancelled {
                discard_all_chunks(&mut tx, job_id).await?;
                self.announce_final(&mut tx, job_id, traceparent).await?;
                tx.commit().await?;
                return Ok(true);
            }
        }
        let applied = on_tx!(tx,
            conn => postgres::attempts::end(conn, job_id, attempt, &end).await?,
            conn => sqlite::attempts::end(conn, job_id, attempt, &end).await?,
        );
        if !applied {
            return Ok(false);
        }
        if let AttemptOutcome::RetryAt { .. } | AttemptOutcome::HandBack { .. } = outcome {
            queue_again(&mut tx, job_id).await?;
        }
        if end.status.is_final() {
            // No attempt follows to clear them: an attempt that ends the
            // job without a result takes its chunks with it. (A retry's are
            // cleared by the next attempt, see `discard_chunks_before`.)
            discard_all_chunks(&mut tx, job_id).await?;
            self.announce_final(&mut tx, job_id, traceparent).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Ends successful attempts together (group commit): status, result
    /// and announcement, for each only while its attempt is the current one
    /// and still running. Answers in input order whether each applied
    /// (`false`: a stale or duplicate attempt, whose result is dropped: the
    /// fence).
    ///
    /// On Postgres, the jobs no webhook can want an event of end in one
    /// statement with no transaction around it (`BEGIN`, the webhooks' read
    /// and `COMMIT` are round trips a slot waits for); the others, and any
    /// attempt that statement did not end, go through the transaction that
    /// writes events, which applies the fence again.
    pub async fn finish_succeeded(&self, attempts: &[SuccessWrite]) -> Result<Vec<bool>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let now = Millis(now_ms());
        let ended: HashSet<(String, i64)> = match &self.db {
            crate::Db::Postgres(pool) => {
                let successes = successes_of(attempts);
                on_postgres!(self, self.per_job_pool(pool), pool =>
                    postgres::attempts::succeed(pool, &successes, now, true).await?
                )
                .into_iter()
                .collect()
            }
            crate::Db::Sqlite(_) => HashSet::new(),
        };
        let ends = |write: &SuccessWrite| ended.contains(&(write.job_id.clone(), write.attempt));
        let rest: Vec<&SuccessWrite> = attempts.iter().filter(|write| !ends(write)).collect();
        let mut rest_applied = self
            .finish_succeeded_announced(&rest, now)
            .await?
            .into_iter();
        Ok(attempts
            .iter()
            .map(|write| ends(write) || rest_applied.next() == Some(true))
            .collect())
    }

    /// SQLite: a worker's claims and successes in one turn of the writer
    /// and one commit, the successes first (a place under a cap that one
    /// frees is free for the claims).
    async fn claim_and_succeed_in_one_transaction(
        &self,
        job_ids: &[String],
        worker_id: &str,
        lease_until: Millis,
        caps: &Caps,
        successes: &[SuccessWrite],
    ) -> Result<(Vec<Option<Claim>>, Vec<bool>)> {
        let now = Millis(now_ms());
        let mut tx = self.begin_write().await?;
        let succeeded = self
            .succeed_announced_in(&mut tx, &successes.iter().collect::<Vec<_>>(), now)
            .await?;
        let rows = claim_in(&mut tx, job_ids, now, lease_until, worker_id, caps).await?;
        tx.commit().await?;
        Ok((in_claim_order(job_ids, rows), succeeded))
    }

    /// [`Store::finish_succeeded`] in one transaction that also writes the
    /// events of the webhooks that match; answers in input order.
    async fn finish_succeeded_announced(
        &self,
        attempts: &[&SuccessWrite],
        now: Millis,
    ) -> Result<Vec<bool>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let applied = self.succeed_announced_in(&mut tx, attempts, now).await?;
        tx.commit().await?;
        Ok(applied)
    }

    /// The writes of [`Store::finish_succeeded_announced`] inside `tx`.
    async fn succeed_announced_in(
        &self,
        tx: &mut crate::WriteTx,
        attempts: &[&SuccessWrite],
        now: Millis,
    ) -> Result<Vec<bool>> {
        let successes = successes_of(attempts.iter().copied());
        // Keyed by attempt too: a stale attempt of a job may end in the
        // same batch as the current one. On Postgres the statement also
        // sends the batch's NOTIFY.
        let applied: HashSet<(String, i64)> = on_tx!(tx,
            conn => postgres::attempts::succeed(conn, &successes, now, false).await?,
            conn => sqlite::attempts::succeed(conn, &successes, now).await?,
        )
        .into_iter()
        .collect();
        let applies =
            |write: &SuccessWrite| applied.contains(&(write.job_id.clone(), write.attempt));
        let finished: Vec<String> = attempts
            .iter()
            .filter(|write| applies(write))
            .map(|write| write.job_id.clone())
            .collect();
        if !finished.is_empty() {
            // Webhooks are read in a statement of their own, after the
            // update holds the jobs' rows: a webhook registered for one of
            // them meanwhile is committed by then (its registration locks
            // the job), or waits and sees the job final.
            let traceparent = |job_id: &str| {
                attempts
                    .iter()
                    .find(|write| write.job_id == job_id && applies(write))
                    .and_then(|write| write.traceparent.as_deref())
            };
            self.create_events(tx, &finished, traceparent).await?;
        }
        Ok(attempts.iter().copied().map(applies).collect())
    }

    /// [`Store::finish_succeeded`] for a group commit whose writes must not
    /// fail one another: when the group's transaction fails for anything
    /// but an outage (a result the database refuses, say), each write is
    /// tried again in a transaction of its own, so only the refused one
    /// fails. Answers in input order.
    pub async fn finish_succeeded_each(
        &self,
        attempts: &[SuccessWrite],
    ) -> Result<Vec<Result<bool>>> {
        self.each_alone_if_refused(attempts, None).await
    }

    /// Writes `attempts` as one group; when the group fails for anything
    /// but an outage, writes each again alone, so only a write the
    /// database refuses fails. With `announced_at`, the writes are those
    /// the statement for unwatched jobs did not end, and only the
    /// transaction that writes events runs. Answers in input order.
    async fn each_alone_if_refused(
        &self,
        attempts: &[SuccessWrite],
        announced_at: Option<Millis>,
    ) -> Result<Vec<Result<bool>>> {
        let write = async |group: &[SuccessWrite]| match announced_at {
            None => self.finish_succeeded(group).await,
            Some(now) => {
                self.finish_succeeded_announced(&group.iter().collect::<Vec<_>>(), now)
                    .await
            }
        };
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        match write(attempts).await {
            Ok(applied) => Ok(applied.into_iter().map(Ok).collect()),
            Err(error) if attempts.len() > 1 && !error.is_unavailable() => {
                tracing::warn!(%error, writes = attempts.len(), "a group commit of successes failed; writing each alone");
                let mut answers = Vec::with_capacity(attempts.len());
                for attempt in attempts {
                    let applied = write(std::slice::from_ref(attempt)).await;
                    answers.push(applied.map(|applied| applied.first() == Some(&true)));
                }
                Ok(answers)
            }
            Err(error) => Err(error),
        }
    }

    /// Wakes parked jobs whose cap has room now: the wake a job's end
    /// makes can be missed (a claim parking a job while the end that frees
    /// its place commits), a job woken can be cancelled before it runs, and
    /// a cap can be raised or removed. For each tenant (and kind) with jobs
    /// parked, as many as the cap leaves room for are made due, in rank
    /// order. Returns how many were woken.
    pub async fn wake_parked(&self, caps: &Caps) -> Result<u64> {
        let groups = on_pool!(self,
            pool => postgres::attempts::parked_groups(pool).await?,
            pool => sqlite::attempts::parked_groups(pool).await?,
        );
        if groups.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let mut woken = 0;
        for group in groups {
            let (tenant, kind) = (group.tenant_id.as_str(), group.kind.as_deref());
            let cap = match (Cap::parse(&group.capped), kind) {
                (Some(Cap::Tenant), _) => Some(caps.per_tenant).filter(|cap| *cap > 0),
                (Some(Cap::Kind), Some(kind)) => caps.of_kind(kind),
                _ => continue,
            };
            let room = match cap {
                None => group.parked.min(WAKE_UNCAPPED),
                Some(cap) => {
                    let running = on_tx!(tx,
                        conn => postgres::attempts::running_count(&mut *conn, tenant, kind).await?,
                        conn => sqlite::attempts::running_count(&mut *conn, tenant, kind).await?,
                    );
                    (i64::from(cap) - running).clamp(0, group.parked)
                }
            };
            if room == 0 {
                continue;
            }
            woken += match kind {
                None => on_tx!(tx,
                    conn => postgres::attempts::wake_at_tenant_cap(conn, tenant, room).await?,
                    conn => sqlite::attempts::wake_at_tenant_cap(conn, tenant, room).await?,
                ),
                Some(kind) => on_tx!(tx,
                    conn => postgres::attempts::wake_at_kind_cap(conn, tenant, kind, room).await?,
                    conn => sqlite::attempts::wake_at_kind_cap(conn, tenant, kind, room).await?,
                ),
            };
        }
        tx.commit().await?;
        Ok(woken)
    }

    /// How many of the tenant's jobs are RUNNING, and how many of them are
    /// of `kind`: what a job parked at a cap waits on.
    pub async fn running_counts(&self, tenant_id: &str, kind: &str) -> Result<(i64, i64)> {
        let running = async |kind| -> Result<i64> {
            Ok(on_pool!(self,
                pool => postgres::attempts::running_count(pool, tenant_id, kind).await?,
                pool => sqlite::attempts::running_count(pool, tenant_id, kind).await?,
            ))
        };
        Ok((running(None).await?, running(Some(kind)).await?))
    }

    /// Running jobs whose lease lapsed (their worker died or hung): back to
    /// the queue as a new attempt, or `FAILED` once attempts are used up.
    /// Returns how many were requeued, and the jobs that reached a final
    /// status.
    pub async fn requeue_lapsed_leases(&self, limit: i64) -> Result<(usize, Vec<String>)> {
        let now = Millis(now_ms());
        let mut tx = self.begin_write().await?;
        let lapsed = on_tx!(tx,
            conn => postgres::attempts::lapsed(conn, now, limit).await?,
            conn => sqlite::attempts::lapsed(conn, now, limit).await?,
        );
        let mut requeued = 0;
        let mut failed = Vec::new();
        for row in lapsed {
            if row.untaken && row.handbacks < MOST_UNTAKEN_HANDBACKS {
                // A lease whose answer never reached its worker (the long
                // poll's client had gone): the attempt never started, so
                // it is not counted. Bounded, so that a worker that dies
                // before its first heartbeat cannot keep a job forever.
                on_tx!(tx,
                    conn => postgres::attempts::hand_back_untaken(conn, &row.job_id, now).await?,
                    conn => sqlite::attempts::hand_back_untaken(conn, &row.job_id, now).await?,
                );
                queue_again(&mut tx, &row.job_id).await?;
                requeued += 1;
                continue;
            }
            let message = format!(
                "attempt {} stopped responding: its lease lapsed",
                row.counted
            );
            // A saga with steps to run or undo is never failed here: its
            // next attempt compensates first (`docs/sagas.md`).
            if row.counted < row.max_attempts || row.saga_unfinished {
                on_tx!(tx,
                    conn => postgres::attempts::requeue_lapsed(conn, &row.job_id, now, &message).await?,
                    conn => sqlite::attempts::requeue_lapsed(conn, &row.job_id, now, &message).await?,
                );
                queue_again(&mut tx, &row.job_id).await?;
                requeued += 1;
            } else {
                on_tx!(tx,
                    conn => postgres::attempts::fail_lapsed(conn, &row.job_id, now, &message).await?,
                    conn => sqlite::attempts::fail_lapsed(conn, &row.job_id, now, &message).await?,
                );
                discard_all_chunks(&mut tx, &row.job_id).await?;
                self.announce_final(&mut tx, &row.job_id, None).await?;
                failed.push(row.job_id);
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
        let now = Millis(now_ms());
        let mut released = 0;
        for (job_id, attempt) in attempts {
            let mut tx = self.begin_write().await?;
            let done = on_tx!(tx,
                conn => postgres::attempts::hand_back(conn, job_id, *attempt, now).await?,
                conn => sqlite::attempts::hand_back(conn, job_id, *attempt, now).await?,
            );
            if done {
                queue_again(&mut tx, job_id).await?;
                released += 1;
            }
            tx.commit().await?;
        }
        Ok(released)
    }
}

/// The claims of [`Store::claim_attempts`] inside `tx`.
async fn claim_in(
    tx: &mut crate::WriteTx,
    job_ids: &[String],
    now: Millis,
    lease_until: Millis,
    worker_id: &str,
    caps: &Caps,
) -> Result<Vec<ClaimRow>> {
    Ok(on_tx!(tx,
        conn => postgres::attempts::claim(conn, job_ids, now, lease_until, worker_id, caps).await?,
        conn => sqlite::attempts::claim(conn, job_ids, now, lease_until, worker_id, caps, false).await?,
    ))
}

/// The claims of `rows` in the order of `job_ids`, `None` where a job was
/// not claimed; a job named twice is claimed by its first place.
fn in_claim_order(job_ids: &[String], rows: Vec<ClaimRow>) -> Vec<Option<Claim>> {
    let mut claims: HashMap<String, Claim> = rows
        .into_iter()
        .map(|row| {
            let claim = Claim::from(row);
            (claim.job_id.clone(), claim)
        })
        .collect();
    job_ids.iter().map(|id| claims.remove(id)).collect()
}

/// The writes as the success statements bind them.
fn successes_of<'a>(writes: impl IntoIterator<Item = &'a SuccessWrite>) -> Vec<Success<'a>> {
    writes
        .into_iter()
        .map(|write| Success {
            job_id: &write.job_id,
            attempt: write.attempt,
            document: match &write.result {
                ResultBody::Document(document) => Some(document),
                ResultBody::Chunks(_) => None,
            },
            chunks: match write.result {
                ResultBody::Document(_) => None,
                ResultBody::Chunks(count) => Some(count),
            },
        })
        .collect()
}
