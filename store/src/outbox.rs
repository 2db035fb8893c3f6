//! The outbox: one row per job the queue is to carry, written in the
//! transaction that queues the job and leased by the relay that publishes it.

use std::{collections::HashSet, sync::atomic::Ordering};

use shared::time::now_ms;

use crate::{Result, Store, WriteTx, on_pool, on_tx, postgres, sql::Millis, sqlite};

pub(crate) use crate::rows::outbox::OutboxRow;
pub use crate::rows::outbox::SweepCursor;

/// A job the queue is to carry: its id, its tenant, which the queue
/// schedules fairly, and its rank (unix ms), which orders the tenant's jobs
/// (`shared::model::Priority::rank_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub job_id: String,
    pub tenant_id: String,
    pub rank_at: i64,
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
    /// Records which queue this database's jobs reach: the job rows
    /// themselves (no outbox row is written from now on, and those left
    /// are deleted: nothing reads them), or Redis (the outbox bridges the
    /// two). Every process records its own at start; a deployment runs one.
    /// The store's clones remember it ([`Store::queue_in_job_rows`]).
    pub async fn record_queue(&self, in_job_rows: bool) -> Result<()> {
        let mut tx = self.begin_write().await?;
        match in_job_rows {
            true => on_tx!(tx,
                conn => postgres::outbox::mark_queue_in_job_rows(conn).await?,
                conn => sqlite::outbox::mark_queue_in_job_rows(conn).await?,
            ),
            false => on_tx!(tx,
                conn => postgres::outbox::mark_queue_in_redis(conn).await?,
                conn => sqlite::outbox::mark_queue_in_redis(conn).await?,
            ),
        }
        tx.commit().await?;
        self.queue_in_job_rows.store(in_job_rows, Ordering::Release);
        Ok(())
    }

    /// Whether the job rows are the queue, as this store last recorded it
    /// ([`Store::record_queue`]); `false` before it recorded any.
    pub fn queue_in_job_rows(&self) -> bool {
        self.queue_in_job_rows.load(Ordering::Acquire)
    }

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
        let mut due = on_tx!(tx,
            conn => postgres::outbox::lease_due(conn, now, limit, republish_after_ms).await?,
            conn => sqlite::outbox::lease_due(conn, now, limit, republish_after_ms).await?,
        );
        // A row whose job was claimed, finished or cancelled is left over
        // (a claim's delete can miss a row written while it waited: see
        // `claim_and_succeed` in `postgres/attempts.rs`): dropped, not
        // published. The delete looks at
        // each job as it is now; the rows stay locked meanwhile, so a job
        // queued again (which writes its row in the same transaction)
        // waits, and gets its row back after this commits.
        let stale: Vec<&str> = due
            .iter()
            .filter(|row| row.queued != Some(true))
            .map(|row| row.job_id.as_str())
            .collect();
        if !stale.is_empty() {
            let dropped: HashSet<String> = on_tx!(tx,
                conn => postgres::outbox::drop_unqueued(conn, &stale).await?,
                conn => sqlite::outbox::drop_unqueued(conn, &stale).await?,
            )
            .into_iter()
            .collect();
            due.retain(|row| !dropped.contains(&row.job_id));
            if due.is_empty() {
                tx.commit().await?;
                return Ok(Vec::new());
            }
        }
        let due: Vec<QueuedJob> = due.into_iter().map(QueuedJob::from).collect();
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

    /// Up to `limit` jobs the queue should hold, in the sweep's order after
    /// `after`: queued, due since `published_before`, not parked by a cap,
    /// and with no outbox row but one published before then. That is a job
    /// pushed at once without a row ([`crate::Publishing::CallerSwept`]),
    /// or one the relay published, whether its push happened or not. A
    /// relay asks the queue about them ([`Store::republish_outbox`] for
    /// those it lost). Returns the next page's cursor, or `None` after the
    /// last page.
    pub async fn queued_unclaimed(
        &self,
        after: &SweepCursor,
        published_before: i64,
        limit: i64,
    ) -> Result<(Vec<QueuedJob>, Option<SweepCursor>)> {
        let before = Millis(published_before);
        let rows = on_pool!(self,
            pool => postgres::outbox::queued_unclaimed(pool, after, before, limit).await?,
            pool => sqlite::outbox::queued_unclaimed(pool, after, before, limit).await?,
        );
        let next = match rows.last() {
            Some(last) if rows.len() as i64 == limit => Some(SweepCursor {
                kind: last.kind.clone(),
                run_after: last.run_after.0,
                job_id: last.job_id.clone(),
            }),
            _ => None,
        };
        let jobs = rows
            .into_iter()
            .map(|row| QueuedJob {
                job_id: row.job_id,
                tenant_id: row.tenant_id,
                rank_at: row.rank_at.map_or(0, i64::from),
            })
            .collect();
        Ok((jobs, next))
    }

    /// Publishes again those of `jobs` (from [`Store::queued_unclaimed`])
    /// that are still unclaimed and were not published since
    /// `published_before`, through `publish`, before the new publish time
    /// commits: a published row moves ahead by its own wait, and a job
    /// without a row gets one, published, due again `republish_after_ms`
    /// from now. The conditions keep two relays that found the same lost
    /// message from both sending it. Returns the jobs published.
    pub async fn republish_outbox<F, Fut>(
        &self,
        jobs: &[QueuedJob],
        published_before: i64,
        republish_after_ms: i64,
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
            conn => postgres::outbox::republish(conn, &ids, now, before, republish_after_ms).await?,
            conn => sqlite::outbox::republish(conn, &ids, now, before, republish_after_ms).await?,
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
    /// had been, and gives every due, unparked queued job without a row one
    /// due now (a job pushed without a row); returns how many. For a queue
    /// that starts empty (the in-process one) or came back empty (Redis).
    /// Rows not yet published keep their time (a retry's backoff).
    pub async fn make_outbox_due_now(&self) -> Result<u64> {
        let now = Millis(now_ms());
        let mut tx = self.begin_write().await?;
        let due = on_tx!(tx,
            conn => postgres::outbox::make_published_due(conn, now).await?,
            conn => sqlite::outbox::make_published_due(conn, now).await?,
        );
        tx.commit().await?;
        Ok(due)
    }

    /// For a message whose claim found its job not claimable: gives each
    /// of `job_ids` still queued and unparked an outbox row due when the
    /// job is (at once when it is due by now), unpublished (an earlier
    /// publish time it has is kept), so the job is published again then
    /// and the message can be let go. Such a job was not due at the
    /// claim's clock (whatever brought its message early, or a clock read
    /// a moment before the one that made the job); a job the claim found
    /// running or finished gets none. Returns how many rows it made or
    /// moved.
    pub async fn publish_when_due(&self, job_ids: &[String]) -> Result<u64> {
        if job_ids.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let moved = on_tx!(tx,
            conn => postgres::outbox::publish_when_due(conn, job_ids).await?,
            conn => sqlite::outbox::publish_when_due(conn, job_ids).await?,
        );
        tx.commit().await?;
        Ok(moved)
    }

    /// Makes the jobs' outbox rows due at `at`, unpublished, as their
    /// publish failed: a job pushed without a row gets one, if it is still
    /// queued.
    pub async fn retry_outbox_soon(&self, job_ids: &[String], at: i64) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        on_tx!(tx,
            conn => postgres::outbox::set_due(conn, job_ids, Millis(at)).await?,
            conn => sqlite::outbox::set_due(conn, job_ids, Millis(at)).await?,
        );
        tx.commit().await?;
        Ok(())
    }
}

/// Hands a job just queued again (a retry, a hand-back, a lapsed lease)
/// to the queue at its due time.
pub(crate) async fn queue_again(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    on_tx!(tx,
        conn => postgres::outbox::queue_again(conn, job_id).await?,
        conn => sqlite::outbox::queue_again(conn, job_id).await?,
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
