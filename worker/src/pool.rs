//! The worker pool, the one entry point of this crate's parts: a
//! [`Runner`] fed by apalis workers (`workers.rs`), the background tasks
//! beside them (`background.rs`), and the shutdown that hands unfinished
//! attempts back to the queue.

use std::sync::Arc;

use queue::Queue;
use shared::{notify::Signals, settings::Settings};
use store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{Result, background::BackgroundTasks, runner::Runner, workers::ApalisWorkers};

/// A worker pool with its relay, lease sweeper, webhook dispatcher,
/// retention pruner and queue vacuum.
pub struct WorkerPool {
    pub runner: Arc<Runner>,
    queue: Queue,
    workers: ApalisWorkers,
    background: BackgroundTasks,
}

impl WorkerPool {
    pub fn new(store: Store, queue: Queue, signals: Signals, settings: &Settings) -> Self {
        let worker_id = format!(
            "{}-{}-{}",
            settings.queue_name,
            std::process::id(),
            ulid::Ulid::generate()
        );
        let background = BackgroundTasks::new(store.clone(), settings);
        let runner = Arc::new(Runner::new(store, signals, settings, worker_id));
        Self {
            workers: ApalisWorkers::new(
                runner.clone(),
                queue.clone(),
                settings.worker_concurrency(),
                settings.shutdown_grace,
            ),
            runner,
            queue,
            background,
        }
    }

    /// Runs the relay (where Redis is the queue), the sweeper, the dispatcher, the pruner, the queue
    /// vacuum and the apalis workers until `shutdown` is cancelled, then
    /// drains for the grace period.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let store = self.runner.store.clone();
        let signals = self.runner.signals.clone();
        let stopping = {
            let (runner, shutdown) = (self.runner.clone(), shutdown.clone());
            tokio::spawn(async move {
                shutdown.cancelled().await;
                runner.stopping.cancel();
            })
        };
        let background = self.background.start(&store, &self.queue, &signals);
        info!(worker_id = self.runner.worker_id, concurrency = self.workers.concurrency(), queue = ?self.queue, "worker pool started");
        let result = self.workers.run_until_shutdown(&shutdown).await;
        stopping.abort();
        background.stop().await;
        let unfinished = self.runner.running_attempts();
        if !unfinished.is_empty() {
            match store.release_attempts(&unfinished).await {
                Ok(n) => info!(released = n, "handed unfinished attempts back to the queue"),
                Err(error) => {
                    warn!(%error, "could not release unfinished attempts; their leases will lapse")
                }
            }
        }
        result
    }
}
