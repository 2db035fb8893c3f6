//! Bounded storage. The pruner deletes jobs that have been final for longer
//! than `JOB_RETENTION` (with their results, webhook events, delivery log
//! and per-job webhooks: `Store::prune_finished_jobs`); the queue vacuum
//! deletes what apalis keeps of every acknowledged message
//! (`Queue::forget_finished`); the audit pruner deletes the audit log's
//! entries older than `AUDIT_RETENTION`. All run in every worker pool, beside the
//! lease sweeper, and are safe to run in many processes at once.

use std::time::Duration;

use shared::time::{duration_ms, now_ms};
use store::{Pruned, Store};
use tokio_util::sync::CancellationToken as Shutdown;
use tracing::{debug, warn};

use queue::Queue;

/// How often the pruner looks when it found less than a batch: a job is
/// gone at most this long (plus one batch) after its retention ends.
const PRUNE_IDLE: Duration = Duration::from_secs(5);
/// Jobs per transaction: at least this many, at most
/// `Store::max_prune_batch`, sized so that one transaction takes about
/// `Store::prune_round_target`.
const PRUNE_MIN_BATCH: usize = 50;

/// After a full batch the pruner rests this many times as long as the
/// batch took, so it holds the database (SQLite's one writer, Postgres's
/// cores) at most a tenth of the time while it works through a backlog:
/// little enough that submits do not feel it, and still far faster than a
/// service finishes jobs (`docs/performance.md` has the measurements).
const PRUNE_REST_FACTOR: u32 = 9;

/// Deletes jobs final for longer than `retention`, in short transactions
/// (see `Store::prune_round_target`), until `shutdown`. A submit waits for at most
/// one of them (on SQLite, which has one writer); a backlog (a service
/// upgraded with millions of old jobs) is worked through at a pace that
/// leaves the rest of the service most of the database.
pub async fn run_pruner(store: Store, retention: Duration, shutdown: Shutdown) {
    let retention_ms = duration_ms(retention);
    let target = store.prune_round_target();
    let most = store.max_prune_batch().max(PRUNE_MIN_BATCH);
    let mut batch = 100.min(most);
    loop {
        let rest = match store
            .prune_finished_jobs(now_ms().saturating_sub(retention_ms), batch)
            .await
        {
            Ok(Pruned { jobs, held: took }) => {
                if jobs > 0 {
                    debug!(jobs, batch, ?took, "pruned finished jobs");
                }
                if jobs < batch {
                    PRUNE_IDLE
                } else {
                    if took < target / 2 {
                        batch = (batch * 2).min(most);
                    } else if took > target * 2 {
                        batch = (batch / 2).max(PRUNE_MIN_BATCH);
                    }
                    (took * PRUNE_REST_FACTOR).max(Duration::from_millis(10))
                }
            }
            Err(error) => {
                warn!(%error, "pruning finished jobs failed; trying again shortly");
                PRUNE_IDLE
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(rest) => {}
        }
    }
}

/// How often the audit log's old entries are looked for.
const AUDIT_PRUNE_EVERY: Duration = Duration::from_secs(10 * 60);

/// Deletes the audit log's entries older than `retention`, at start and
/// every [`AUDIT_PRUNE_EVERY`], until `shutdown`.
pub async fn run_audit_pruner(store: Store, retention: Duration, shutdown: Shutdown) {
    let retention_ms = duration_ms(retention);
    loop {
        match store
            .prune_audit(now_ms().saturating_sub(retention_ms))
            .await
        {
            Ok(0) => {}
            Ok(entries) => debug!(entries, "pruned the audit log"),
            Err(error) => warn!(%error, "pruning the audit log failed; trying again later"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(AUDIT_PRUNE_EVERY) => {}
        }
    }
}

/// How often the queue vacuum runs, and how many finished messages it
/// takes per call.
const VACUUM_EVERY: Duration = Duration::from_secs(5);
const VACUUM_BATCH: usize = 500;

/// Deletes what the queue keeps of finished messages, every
/// [`VACUUM_EVERY`], until `shutdown`; returns at once for the in-process
/// queue, which keeps nothing.
pub async fn run_queue_vacuum(queue: Queue, shutdown: Shutdown) {
    loop {
        loop {
            match queue.forget_finished(VACUUM_BATCH).await {
                Ok(taken) if taken as usize >= VACUUM_BATCH => {
                    // More wait; let other work in between.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(_) => break,
                Err(error) => {
                    warn!(%error, "deleting finished queue messages failed; trying again later");
                    break;
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(VACUUM_EVERY) => {}
        }
    }
}
