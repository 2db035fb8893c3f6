//! The lease sweeper: a running job whose lease lapsed (its worker died or
//! hung) goes back to the queue as a new attempt, or fails once its
//! attempts are used up. Safe to run in many processes at once. It also
//! folds the dashboard's job counters (`Store::fold_job_counts`). Beside
//! it, the waker of jobs parked at a concurrency cap whose cap has room.

use std::time::Duration;

use shared::{notify::Signals, settings::Caps};
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

/// How often jobs parked at a cap are looked at: the longest a parked job
/// waits after a wake was missed (its tenant's jobs end, and each wakes
/// one parked job, at once).
const WAKE_PARKED_EVERY: Duration = Duration::from_secs(1);

/// Wakes jobs parked at a concurrency cap whose cap has room
/// ([`Store::wake_parked`]), once a second.
pub async fn run_parked_waker(store: Store, signals: Signals, caps: Caps, shutdown: Shutdown) {
    loop {
        match store.wake_parked(&caps).await {
            Ok(0) => {}
            Ok(woken) => {
                info!(woken, "woke jobs parked at a concurrency cap");
                signals.outbox_changed();
            }
            Err(error) => warn!(%error, "waking parked jobs failed"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(WAKE_PARKED_EVERY) => {}
        }
    }
}
