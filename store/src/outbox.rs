//! The outbox: one row per job the queue is to carry, written in the
//! transaction that queues the job and leased by the relay that publishes it.

use shared::time::now_ms;

use crate::{Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

/// A job the queue is to carry: its id, its tenant, which the queue
/// schedules fairly, and its rank (unix ms), which orders the tenant's jobs
/// (`shared::model::Priority::rank_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub job_id: String,
    pub tenant_id: String,
    pub rank_at: i64,
}

/// An outbox row with its job's tenant and rank, read without locking the
/// job.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct OutboxRow {
    pub(crate) job_id: String,
    tenant_id: Option<String>,
    rank_at: Option<Millis>,
}

impl From<OutboxRow> for QueuedJob {
    fn from(row: OutboxRow) -> Self {
        QueuedJob {
            job_id: row.job_id,
            tenant_id: row.tenant_id.unwrap_or_default(),
            rank_at: row.rank_at.map_or(0, i64::from),
        }
    }
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
        let now = Millis(now_ms());
        // SQLite: look before taking the one write lock: the embedded api
        // publishes its submits itself, so the relay usually finds none.
        if let crate::Db::Sqlite(db) = &self.db
            && !sqlite::outbox::any_due(&db.pool, now).await?
        {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let due: Vec<QueuedJob> = on_tx!(tx,
            conn => postgres::outbox::lease_due(conn, now, limit, republish_after_ms).await?,
            conn => sqlite::outbox::lease_due(conn, now, limit, republish_after_ms).await?,
        )
        .into_iter()
        .map(QueuedJob::from)
        .collect();
        if due.is_empty() {
            return Ok(due);
        }
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
        let before = Millis(published_before);
        let rows = on_pool!(self,
            pool => postgres::outbox::published_unclaimed(pool, after, before, limit).await?,
            pool => sqlite::outbox::published_unclaimed(pool, after, before, limit).await?,
        );
        Ok(rows.into_iter().map(QueuedJob::from).collect())
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
        let ids: Vec<String> = jobs.iter().map(|job| job.job_id.clone()).collect();
        let (now, before) = (Millis(now_ms()), Millis(published_before));
        let mut tx = self.begin_write().await?;
        let taken: std::collections::HashSet<String> = on_tx!(tx,
            conn => postgres::outbox::republish(conn, &ids, now, before).await?,
            conn => sqlite::outbox::republish(conn, &ids, now, before).await?,
        )
        .into_iter()
        .collect();
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
        let now = Millis(now_ms());
        Ok(on_pool!(self,
            pool => postgres::outbox::make_published_due(pool, now).await?,
            pool => sqlite::outbox::make_published_due(pool, now).await?,
        ))
    }

    /// Makes outbox rows due again (their publish failed).
    pub async fn retry_outbox_soon(&self, job_ids: &[String], at: i64) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        on_pool!(self,
            pool => postgres::outbox::set_due(pool, job_ids, Millis(at)).await?,
            pool => sqlite::outbox::set_due(pool, job_ids, Millis(at)).await?,
        );
        Ok(())
    }
}

/// Queues the job's next publish at `publish_at`, as if never published.
pub(crate) async fn upsert_outbox(tx: &mut WriteTx, job_id: &str, publish_at: i64) -> Result<()> {
    on_tx!(tx,
        conn => postgres::outbox::upsert(conn, job_id, Millis(publish_at)).await?,
        conn => sqlite::outbox::upsert(conn, job_id, Millis(publish_at)).await?,
    );
    Ok(())
}

pub(crate) async fn delete_outbox(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    on_tx!(tx,
        conn => postgres::outbox::delete(conn, job_id).await?,
        conn => sqlite::outbox::delete(conn, job_id).await?,
    );
    Ok(())
}
