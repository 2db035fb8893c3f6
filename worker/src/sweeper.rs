//! The lease sweeper: a running job whose lease lapsed (its worker died or
//! hung) goes back to the queue as a new attempt, or fails once its
//! attempts are used up. Safe to run in many processes at once. It also
//! folds the dashboard's job counters (`Store::fold_job_counts`).

use std::time::Duration;

use shared::notify::Signals;
use store::Store;
use tracing::{info, warn};

use tokio_util::sync::CancellationToken as Shutdown;

pub async fn run_sweeper(store: Store, signals: Signals, every: Duration, shutdown: Shutdown) {
    loop {
        match store.requeue_lapsed_leases(100).await {
            Ok((requeued, failed)) => {
                if requeued > 0 {
                    info!(requeued, "requeued jobs whose lease lapsed");
                    signals.outbox_changed();
                }
                for job_id in failed {
                    info!(job_id, "job failed: its last attempt's lease lapsed");
                    signals.job_finished(&job_id);
                }
            }
            Err(error) => warn!(%error, "lease sweep failed"),
        }
        // The dashboard's counters: their deltas stay few when folded this often.
        if let Err(error) = store.fold_job_counts().await {
            warn!(%error, "folding the job counters failed");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}
