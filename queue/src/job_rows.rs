//! The queue without Redis: the job row is the queue. Workers claim due
//! jobs straight from `jobs` (`Store::claim_due`), fairly between tenants;
//! nothing is fetched, acknowledged or handed back, and a job's lease is
//! the only liveness. What this type adds is the wake: the store's
//! (`store::DueJobWaiter`: on Postgres a NOTIFY, sent by the statement that
//! makes jobs due or by [`JobRowQueue::push`], and a timer on the next due
//! time; a short look on SQLite), and at once after a push from this
//! process.

use std::sync::Arc;

use store::{DueJobWaiter, EarlierApalisTable, QueuedJob, Store};
use tokio::sync::Notify;

use crate::Result;

/// The job rows of the queue named `name` (`{QUEUE_NAME}:jobs`).
#[derive(Clone)]
pub struct JobRowQueue {
    store: Store,
    name: String,
    /// Wakes this process's workers at once after a push from this process.
    pushed_here: Arc<Notify>,
    /// What apalis's Postgres storage of earlier versions left, pruned by
    /// [`crate::Queue::forget_finished`].
    pub(crate) earlier_apalis: EarlierApalisTable,
}

impl std::fmt::Debug for JobRowQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRowQueue")
            .field("name", &self.name)
            .finish()
    }
}

impl JobRowQueue {
    pub fn new(store: Store, name: String) -> Self {
        Self {
            earlier_apalis: store.earlier_apalis_table(),
            store,
            name,
            pushed_here: Arc::new(Notify::new()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<()> {
        Ok(self.store.ping().await?)
    }

    /// Wakes the workers: the jobs are claimable already, their rows being
    /// the queue.
    pub async fn push(&self, jobs: &[QueuedJob]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        self.pushed_here.notify_waiters();
        Ok(self.store.wake_claimers().await?)
    }

    /// Wakes this process's idle workers.
    pub fn wake_here(&self) {
        self.pushed_here.notify_waiters();
    }

    /// What an idle worker waits on.
    pub fn waiter(&self) -> WorkWaiter {
        WorkWaiter {
            due: self.store.due_job_waiter(),
            pushed_here: self.pushed_here.clone(),
        }
    }
}

/// An idle worker's wait for jobs to become due (`store::DueJobWaiter`),
/// also woken by a push from its own process.
pub struct WorkWaiter {
    due: DueJobWaiter,
    pushed_here: Arc<Notify>,
}

impl WorkWaiter {
    pub async fn wait(&mut self) {
        self.due.wait(&self.pushed_here).await;
    }
}
