//! What an api process runs besides answering requests: the outbox relay,
//! or the whole worker pool when it is embedded; the sweeper of expired
//! idempotency keys; the API key refresher; and, on Postgres, the listener
//! that wakes long polls for jobs other processes finish.

use queue::{Queue, run_relay};
use shared::{notify::Signals, settings::Settings};
use store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use worker::WorkerPool;

use crate::{api_keys::ApiKeys, error::BoxError};

/// The background tasks of a running api. Each stops when `shutdown` is
/// cancelled.
pub struct BackgroundTasks {
    /// The embedded worker pool, the one task whose end matters: it
    /// finishes its running jobs before the process exits.
    embedded_pool: Option<JoinHandle<worker::Result<()>>>,
}

impl BackgroundTasks {
    pub fn start(
        settings: &Settings,
        store: &Store,
        queue: &Queue,
        signals: &Signals,
        keys: &ApiKeys,
        shutdown: &CancellationToken,
    ) -> Self {
        {
            let (store, signals) = (store.clone(), signals.clone());
            tokio::spawn(async move { store.forward_finished_notifications(signals).await });
        }
        let embedded_pool = if settings.embedded_worker() {
            let pool = WorkerPool::new(store.clone(), queue.clone(), signals.clone(), settings);
            Some(tokio::spawn(pool.run(shutdown.clone())))
        } else {
            if queue.needs_relay() {
                tokio::spawn(run_relay(
                    store.clone(),
                    queue.clone(),
                    signals.clone(),
                    settings.republish_after,
                    shutdown.clone(),
                ));
            }
            None
        };
        tokio::spawn(sweep_idempotency_keys(store.clone(), shutdown.clone()));
        tokio::spawn(keys.clone().keep_fresh(store.clone(), shutdown.clone()));
        Self { embedded_pool }
    }

    pub fn runs_embedded_pool(&self) -> bool {
        self.embedded_pool.is_some()
    }

    /// Waits until `shutdown` is cancelled, or until the embedded pool
    /// ends on its own (it only does when it cannot start), then cancels
    /// `shutdown` and waits for the pool to finish its running jobs.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), BoxError> {
        let result = match self.embedded_pool {
            Some(mut running) => {
                let ended_early = tokio::select! {
                    result = &mut running => Some(result),
                    () = shutdown.cancelled() => None,
                };
                shutdown.cancel();
                match ended_early {
                    Some(result) => result,
                    None => running.await,
                }
            }
            None => {
                shutdown.cancelled().await;
                Ok(Ok(()))
            }
        };
        Ok(result??)
    }
}

/// Deletes expired idempotency keys in batches, once a minute. An expired
/// key is already treated as new before it is deleted; this keeps the table
/// small.
async fn sweep_idempotency_keys(store: Store, shutdown: CancellationToken) {
    const BATCH: i64 = 1_000;
    loop {
        loop {
            match store.delete_expired_idempotency_keys(BATCH).await {
                Ok(deleted) if deleted as i64 == BATCH => continue,
                Ok(_) => break,
                Err(error) => {
                    warn!(%error, "deleting expired idempotency keys failed");
                    break;
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        }
    }
}
