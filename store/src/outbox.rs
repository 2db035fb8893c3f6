//! The outbox: one row per job the queue is to carry, written in the
//! transaction that queues the job and leased by the relay that publishes it.

use sqlx::Row;

use super::{Store, WriteTx, built, placeholders};
use crate::Result;
use shared::time::now_ms;

/// A job the queue is to carry: its id, and its tenant, which the queue
/// schedules fairly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub job_id: String,
    pub tenant_id: String,
}

impl Store {
    /// Leases up to `limit` due outbox rows and hands them to `publish`
    /// before the lease commits: their next publish time moves
    /// `republish_after_ms` ahead (doubling on each republish, up to 32
    /// times), so a message the queue loses is sent again then at the
    /// latest, and concurrent relays do not take the same rows. A process
    /// that dies after its push and before the commit leaves the rows due
    /// (a duplicate message, which the claim guard drops), never leased
    /// and unpublished. `publish` answers whether the queue has the jobs;
    /// when it has not, nothing is leased. Returns the jobs published.
    pub async fn take_due_outbox<F, Fut>(
        &self,
        limit: i64,
        republish_after_ms: i64,
        publish: F,
    ) -> Result<Vec<QueuedJob>>
    where
        F: FnOnce(Vec<QueuedJob>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
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
        // rows and all, on every call. Both are planned anew each time (not
        // prepared): the outbox is a queue, and a plan cached while it held
        // a few rows scans all of it once it holds a backlog.
        let due = select_outbox(
            &mut tx,
            &format!(
                "publish_at <= $1 ORDER BY publish_at LIMIT $2{}",
                self.dialect.skip_locked()
            ),
            now,
            limit,
        )
        .await?;
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
        query.persistent(false).execute(&mut *tx).await?;
        if !publish(due.clone()).await {
            return Ok(Vec::new());
        }
        shared::failpoints::crash_if_armed("store::outbox_published_before_lease");
        tx.commit().await?;
        Ok(due)
    }

    /// Up to `limit` jobs that were published before `published_before`
    /// and are not yet claimed, in job id order after `after`: the ones
    /// whose message the queue should still hold. A relay asks the queue
    /// about them ([`Store::republish_outbox`] for those it lost).
    pub async fn published_unclaimed(
        &self,
        after: &str,
        published_before: i64,
        limit: i64,
    ) -> Result<Vec<QueuedJob>> {
        let mut conn = self.pool.acquire().await?;
        let sql = format!(
            "{OUTBOX_JOBS} job_id > $1 AND republish_ms > 0 AND publish_at - republish_ms <= $2
             ORDER BY job_id LIMIT $3"
        );
        let rows = sqlx::query(built(&sql))
            .bind(after)
            .bind(published_before)
            .bind(limit)
            .persistent(false)
            .fetch_all(&mut *conn)
            .await?;
        rows.iter().map(queued_job).collect()
    }

    /// Publishes again those of `jobs` (from [`Store::published_unclaimed`])
    /// that are still unclaimed and were not published since
    /// `published_before`, through `publish`, before the new publish time
    /// commits; the condition keeps two relays that found the same lost
    /// message from both sending it. Returns the jobs published.
    pub async fn republish_outbox<F, Fut>(
        &self,
        jobs: &[QueuedJob],
        published_before: i64,
        publish: F,
    ) -> Result<Vec<QueuedJob>>
    where
        F: FnOnce(Vec<QueuedJob>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "UPDATE outbox SET publish_at = $1 + republish_ms
             WHERE republish_ms > 0 AND publish_at - republish_ms <= $2 AND job_id IN ({})
             RETURNING job_id",
            placeholders(3, jobs.len())
        );
        let mut query = sqlx::query(built(&sql))
            .bind(now_ms())
            .bind(published_before);
        for job in jobs {
            query = query.bind(&job.job_id);
        }
        let taken: std::collections::HashSet<String> = query
            .persistent(false)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|row| Ok(row.try_get::<String, _>("job_id")?))
            .collect::<Result<_>>()?;
        let lost: Vec<QueuedJob> = jobs
            .iter()
            .filter(|job| taken.contains(&job.job_id))
            .cloned()
            .collect();
        if lost.is_empty() || !publish(lost.clone()).await {
            return Ok(Vec::new());
        }
        tx.commit().await?;
        Ok(lost)
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
}

/// Outbox rows with their job's tenant, which the queue schedules fairly
/// by; a scalar subquery, so the job rows are read but not locked.
const OUTBOX_JOBS: &str = "SELECT job_id,
        (SELECT tenant_id FROM jobs WHERE jobs.job_id = outbox.job_id) AS tenant_id
    FROM outbox WHERE";

async fn select_outbox(
    tx: &mut WriteTx,
    condition: &str,
    now: i64,
    limit: i64,
) -> Result<Vec<QueuedJob>> {
    let sql = format!("{OUTBOX_JOBS} {condition}");
    let rows = sqlx::query(built(&sql))
        .bind(now)
        .bind(limit)
        .persistent(false)
        .fetch_all(&mut **tx)
        .await?;
    rows.iter().map(queued_job).collect()
}

fn queued_job(row: &sqlx::any::AnyRow) -> Result<QueuedJob> {
    Ok(QueuedJob {
        job_id: row.try_get("job_id")?,
        tenant_id: row
            .try_get::<Option<String>, _>("tenant_id")?
            .unwrap_or_default(),
    })
}

pub(super) async fn upsert_outbox(tx: &mut WriteTx, job_id: &str, publish_at: i64) -> Result<()> {
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

pub(super) async fn delete_outbox(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    sqlx::query("DELETE FROM outbox WHERE job_id = $1")
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
