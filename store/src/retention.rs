//! Retention (`JOB_RETENTION`): a job that has been final for longer than
//! the retention is deleted with everything that hangs off it: its result,
//! its webhook events and their delivery log, and any webhook registered
//! for it alone. Ledger entries are the tenant's data and are never
//! touched; idempotency keys keep their own TTL, so a replay still answers
//! after the job it names is gone.

use sqlx::Row;

use super::{Dialect, Store, built, placeholders};
use crate::Result;

/// Ids bound in one statement at most, on Postgres: a round's statements
/// stay within one TLS record, and its transaction holds few row locks
/// for a short time.
const POSTGRES_IDS_PER_STATEMENT: usize = 250;
/// The same on SQLite, which has no wire: well under its limit of 32,766
/// parameters.
const SQLITE_IDS_PER_STATEMENT: usize = 1_000;

/// What one round of [`Store::prune_finished_jobs`] did.
#[derive(Debug, Clone, Copy)]
pub struct Pruned {
    /// Jobs deleted.
    pub jobs: usize,
    /// How long its transaction ran, not counting the wait for its turn to
    /// write: what it cost the writers that came after it.
    pub held: std::time::Duration,
}

impl Store {
    /// The most jobs [`Store::prune_finished_jobs`] deletes in one round.
    pub fn max_prune_batch(&self) -> usize {
        match self.dialect {
            Dialect::Postgres => POSTGRES_IDS_PER_STATEMENT,
            Dialect::Sqlite => SQLITE_IDS_PER_STATEMENT,
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
        let limit = i64::try_from(limit.min(self.max_prune_batch())).unwrap_or(0);
        let mut tx = self.begin_write().await?;
        let began = std::time::Instant::now();
        // The final statuses stay literals: only they match the partial index jobs_finished.
        let job_ids = sqlx::query(built(&format!(
            "SELECT job_id FROM jobs
             WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at < $1
             ORDER BY finished_at LIMIT $2{}",
            self.dialect.skip_locked()
        )))
        .bind(finished_before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| Ok(row.try_get::<String, _>("job_id")?))
        .collect::<Result<Vec<String>>>()?;
        if job_ids.is_empty() {
            return Ok(Pruned {
                jobs: 0,
                held: began.elapsed(),
            });
        }
        let in_jobs = placeholders(1, job_ids.len());
        let by_job = |sql: String| {
            let mut query = sqlx::query(built(&sql));
            for job_id in &job_ids {
                query = query.bind(job_id);
            }
            query
        };
        // The events' ids first, in id order (on Postgres locked, as
        // `delete_webhook` locks them: a delivery being recorded for one of
        // them finishes first, and two deleters never wait on each other
        // in a cycle); then their log and themselves by those ids. Not by a
        // join: `webhook_deliveries.event_id` and `webhook_events.event_id`
        // collate differently on Postgres, so a join cannot use the log's
        // index and reads the whole log.
        let event_ids = by_job(format!(
            "SELECT event_id FROM webhook_events WHERE job_id IN ({in_jobs})
             ORDER BY event_id{}",
            self.dialect.for_update()
        ))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| Ok(row.try_get::<String, _>("event_id")?))
        .collect::<Result<Vec<String>>>()?;
        for chunk in event_ids.chunks(self.max_prune_batch()) {
            for table in ["webhook_deliveries", "webhook_events"] {
                let sql = format!(
                    "DELETE FROM {table} WHERE event_id IN ({})",
                    placeholders(1, chunk.len())
                );
                let mut query = sqlx::query(built(&sql));
                for event_id in chunk {
                    query = query.bind(event_id);
                }
                query.execute(&mut *tx).await?;
            }
        }
        // A webhook for one job hears nothing more once the job is gone;
        // its events and log went above.
        by_job(format!("DELETE FROM webhooks WHERE job_id IN ({in_jobs})"))
            .execute(&mut *tx)
            .await?;
        by_job(format!(
            "DELETE FROM job_results WHERE job_id IN ({in_jobs})"
        ))
        .execute(&mut *tx)
        .await?;
        // A final job has no outbox row; one left over would cascade.
        let deleted = by_job(format!("DELETE FROM jobs WHERE job_id IN ({in_jobs})"))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(Pruned {
            jobs: deleted as usize,
            held: began.elapsed(),
        })
    }
}
