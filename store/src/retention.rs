//! Retention (`JOB_RETENTION`): a job that has been final for longer than
//! the retention is deleted with everything that hangs off it: its result,
//! its webhook events and their delivery log, and any webhook registered
//! for it alone. Ledger entries are the tenant's data and are never
//! touched; idempotency keys keep their own TTL, so a replay still answers
//! after the job it names is gone.

use std::time::{Duration, Instant};

use crate::{Dialect, Result, Store, on_tx, postgres, sql::Millis, sqlite};

/// Jobs deleted in one round at most, on Postgres: a round's statements
/// stay within one TLS record, and its transaction holds few row locks
/// for a short time.
const POSTGRES_JOBS_PER_ROUND: usize = 250;
/// The same on SQLite, where a round holds the one write turn: every other
/// writer of the process waits for at most one round.
const SQLITE_JOBS_PER_ROUND: usize = 1_000;

/// What one round of [`Store::prune_finished_jobs`] did.
#[derive(Debug, Clone, Copy)]
pub struct Pruned {
    /// Jobs deleted.
    pub jobs: usize,
    /// How long its transaction ran, not counting the wait for its turn to
    /// write: what it cost the writers that came after it.
    pub held: Duration,
}

impl Store {
    /// How long one round of [`Store::prune_finished_jobs`] should take.
    /// On SQLite it holds the one write lock, and a submit arriving
    /// meanwhile waits for it: keep it to a few milliseconds. On Postgres
    /// it locks only the jobs it deletes, which nothing else wants, and
    /// what others feel is its share of the cores, not its length: let it
    /// carry its fixed cost (a round trip per statement) over as many rows
    /// as it may.
    pub fn prune_round_target(&self) -> std::time::Duration {
        match self.dialect() {
            crate::Dialect::Sqlite => std::time::Duration::from_millis(5),
            crate::Dialect::Postgres => std::time::Duration::from_millis(100),
        }
    }

    /// The most jobs [`Store::prune_finished_jobs`] deletes in one round.
    pub fn max_prune_batch(&self) -> usize {
        match self.dialect() {
            Dialect::Postgres => POSTGRES_JOBS_PER_ROUND,
            Dialect::Sqlite => SQLITE_JOBS_PER_ROUND,
        }
    }

    /// Deletes up to `limit` jobs that reached a final status before
    /// `finished_before` (unix ms), oldest first, with their results,
    /// webhook events, delivery log and per-job webhooks, in one short
    /// transaction. The partial index `jobs_finished` finds them without
    /// reading any other job.
    ///
    /// Safe beside everything else, and in several processes at once: on
    /// Postgres the jobs are taken `FOR UPDATE SKIP LOCKED`, so two pruners
    /// take different jobs and a job another transaction holds (a webhook
    /// being registered for it, a cancel reading it) is left for the next
    /// round; on SQLite the transaction takes its turn on the write gate
    /// like every other writer, so a submit waits at most one batch.
    pub async fn prune_finished_jobs(&self, finished_before: i64, limit: usize) -> Result<Pruned> {
        let batch = self.max_prune_batch();
        let limit = i64::try_from(limit.min(batch)).unwrap_or(0);
        let finished_before = Millis(finished_before);
        let mut tx = self.begin_write().await?;
        let began = Instant::now();
        let job_ids = on_tx!(tx,
            conn => postgres::retention::take_finished(conn, finished_before, limit).await?,
            conn => sqlite::retention::finished(conn, finished_before, limit).await?,
        );
        if job_ids.is_empty() {
            return Ok(Pruned {
                jobs: 0,
                held: began.elapsed(),
            });
        }
        // The events' ids first, in id order (on Postgres locked, as
        // `delete_webhook` locks them: a delivery being recorded for one of
        // them finishes first, and two deleters never wait on each other
        // in a cycle); then their log and themselves by those ids.
        let event_ids = on_tx!(tx,
            conn => postgres::retention::lock_events_of(conn, &job_ids).await?,
            conn => sqlite::retention::events_of(conn, &job_ids).await?,
        );
        for chunk in event_ids.chunks(batch) {
            on_tx!(tx,
                conn => postgres::retention::delete_events(conn, chunk).await?,
                conn => sqlite::retention::delete_events(conn, chunk).await?,
            );
        }
        let deleted = on_tx!(tx,
            conn => postgres::retention::delete_jobs(conn, &job_ids).await?,
            conn => sqlite::retention::delete_jobs(conn, &job_ids).await?,
        );
        tx.commit().await?;
        Ok(Pruned {
            jobs: usize::try_from(deleted).unwrap_or(usize::MAX),
            held: began.elapsed(),
        })
    }
}
