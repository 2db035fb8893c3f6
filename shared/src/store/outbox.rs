//! The outbox: one row per job the queue is to carry, written in the
//! transaction that queues the job and leased by the relay that publishes it.

use sqlx::Row;

use super::{Store, WriteTx, built, placeholders};
use crate::{Result, time::now_ms};

/// A job the queue is to carry: its id, and its tenant, which the queue
/// schedules fairly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub job_id: String,
    pub tenant_id: String,
}

impl Store {
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
        // rows and all, on every call. Both are planned anew each time (not
        // prepared): the outbox is a queue, and a plan cached while it held
        // a few rows scans all of it once it holds a backlog.
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
        .persistent(false)
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
        query.persistent(false).execute(&mut *tx).await?;
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
