//! What a worker pool runs beside its apalis workers: the outbox relay, the
//! lease sweeper, the webhook dispatcher, the retention pruners, the queue
//! vacuum, the scheduler of recurring schedules and the queue sampler of
//! the metrics. Each is safe to run in many processes at once, and runs
//! until the pool stops it, after its apalis workers have stopped.

use std::time::Duration;

use queue::{Queue, run_relay};
use shared::{notify::Signals, settings::Settings};
use store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{
    Dispatcher,
    gauges::run_queue_sampler,
    retention::{run_audit_pruner, run_pruner, run_queue_vacuum},
    scheduler::run_scheduler,
    sweeper::{run_parked_waker, run_sweeper},
};

/// The background tasks of a pool, as configured; [`BackgroundTasks::start`]
/// runs them.
pub struct BackgroundTasks {
    republish_after: Duration,
    sweep_every: Duration,
    job_retention: Duration,
    audit_retention: Duration,
    dispatcher: Dispatcher,
    registry: reports::Registry,
    caps: shared::settings::Caps,
    sample_every: Duration,
    metrics_tenants: u16,
}

impl BackgroundTasks {
    pub fn new(store: Store, settings: &Settings) -> Self {
        let webhook_retries: Duration = settings.webhook_retry_schedule.0.iter().sum();
        if settings.job_retention < webhook_retries {
            warn!(
                job_retention = ?settings.job_retention,
                ?webhook_retries,
                "JOB_RETENTION is shorter than WEBHOOK_RETRY_SCHEDULE: a job may be deleted, \
                 with its events, while a receiver is still being retried"
            );
        }
        Self {
            dispatcher: Dispatcher::new(store, settings),
            republish_after: settings.republish_after,
            sweep_every: (settings.job_lease / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(5)),
            job_retention: settings.job_retention,
            audit_retention: settings.audit_retention,
            registry: reports::Registry::new(settings.enable_diagnostic_kinds),
            caps: settings.caps(),
            sample_every: settings.metrics_sample_interval,
            metrics_tenants: settings.metrics_tenants,
        }
    }

    /// Spawns the relay, the sweeper, the dispatcher, the pruner, the
    /// queue vacuum and the scheduler; they run until [`Running::stop`].
    pub fn start(&self, store: &Store, queue: &Queue, signals: &Signals) -> Running {
        let background = CancellationToken::new();
        let relay = queue.needs_relay().then(|| {
            tokio::spawn(run_relay(
                store.clone(),
                queue.clone(),
                signals.clone(),
                self.republish_after,
                background.clone(),
            ))
        });
        let sweeper = tokio::spawn(run_sweeper(
            store.clone(),
            signals.clone(),
            self.sweep_every,
            background.clone(),
        ));
        let dispatcher = tokio::spawn(
            self.dispatcher
                .clone()
                .run(signals.clone(), background.clone()),
        );
        let pruner = tokio::spawn(run_pruner(
            store.clone(),
            self.job_retention,
            background.clone(),
        ));
        let audit_pruner = tokio::spawn(run_audit_pruner(
            store.clone(),
            self.audit_retention,
            background.clone(),
        ));
        let vacuum = tokio::spawn(run_queue_vacuum(queue.clone(), background.clone()));
        let scheduler = tokio::spawn(run_scheduler(
            store.clone(),
            self.registry.clone(),
            signals.clone(),
            background.clone(),
        ));
        let waker = tokio::spawn(run_parked_waker(
            store.clone(),
            signals.clone(),
            self.caps.clone(),
            background.clone(),
        ));
        let sampler = tokio::spawn(run_queue_sampler(
            store.clone(),
            self.registry.clone(),
            self.metrics_tenants,
            self.sample_every,
            background.clone(),
        ));
        let tasks = [
            sweeper,
            dispatcher,
            pruner,
            audit_pruner,
            vacuum,
            scheduler,
            waker,
            sampler,
        ];
        Running {
            background,
            tasks: relay.into_iter().chain(tasks).collect(),
        }
    }
}

/// The running background tasks of a pool.
pub struct Running {
    background: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops every task and waits for each to end.
    pub async fn stop(self) {
        self.background.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
