//! Retention (`JOB_RETENTION`): a job that has been final for longer than
//! the retention is deleted with everything that hangs off it: its result,
//! its webhook events and their delivery log, and any webhook registered
//! for it alone. Ledger entries are the tenant's data and are never
//! touched; idempotency keys keep their own TTL, so a replay still answers
//! after the job it names is gone.
//!
//! Also apalis's own queue tables (its SQLite and Postgres storages), which
//! keep a row for every acknowledged message unless someone deletes it.

use sqlx::Row;

use super::{Dialect, Store, built, placeholders};
use crate::Result;

/// Ids bound in one statement at most, on Postgres. sqlx 0.9 does not set
/// `TCP_NODELAY`, and over TLS (which it prefers, and Postgres usually
/// offers) a message longer than one TLS record (16 KB) goes out in two
/// writes, the second of which waits for the server's delayed ACK: 40 ms a
/// statement. 250 ids bind 10 KB; 800 cost 190 ms a batch, against 15 ms
/// without TLS.
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

/// apalis's SQLite storage (separate `worker` processes on SQLite): deletes
/// up to `limit` rows of `queue` whose message was acknowledged (`Done`) or
/// given up (`Killed`, or `Failed` with no attempt left); returns how many.
/// apalis never looks at such a row again: its fetch takes `Pending` rows
/// and retryable `Failed` ones, its orphan recovery `Running` and `Queued`
/// ones. (apalis's own `vacuum` deletes them all in one statement and then
/// rebuilds the whole file with `VACUUM`.) apalis's index on `(job_type,
/// status, run_at)` finds them.
pub async fn delete_finished_sqlite_messages(
    pool: &sqlx::SqlitePool,
    queue: &str,
    limit: i64,
) -> Result<u64> {
    let deleted = sqlx::query(
        "DELETE FROM Jobs WHERE rowid IN (
             SELECT rowid FROM Jobs
             WHERE status IN ('Done', 'Failed', 'Killed') AND done_at IS NOT NULL
               AND (status <> 'Failed' OR attempts >= max_attempts) AND job_type = $1
             LIMIT $2)",
    )
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

/// apalis's Postgres storage (Postgres without Redis): an index on its
/// finished rows, which it has none of, so deleting them reads nothing
/// else. Made after apalis's own setup (it owns the `apalis` schema);
/// processes starting together take turns on an advisory lock, as a
/// concurrent `CREATE INDEX IF NOT EXISTS` of one name can fail.
pub async fn index_finished_postgres_messages(pool: &sqlx::PgPool) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('receipt_apalis_jobs_finished'))")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE INDEX IF NOT EXISTS receipt_apalis_jobs_finished ON apalis.jobs (job_type, done_at)
         WHERE status IN ('Done', 'Failed', 'Killed')",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// apalis's Postgres storage: [`delete_finished_sqlite_messages`] there.
/// `SKIP LOCKED`, so processes doing this at once take different rows and
/// none waits on an acknowledgement in progress.
pub async fn delete_finished_postgres_messages(
    pool: &sqlx::PgPool,
    queue: &str,
    limit: i64,
) -> Result<u64> {
    let deleted = sqlx::query(
        "DELETE FROM apalis.jobs WHERE id IN (
             SELECT id FROM apalis.jobs
             WHERE status IN ('Done', 'Failed', 'Killed') AND job_type = $1
               AND (status <> 'Failed' OR attempts >= max_attempts)
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(queue)
    .bind(limit)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}
