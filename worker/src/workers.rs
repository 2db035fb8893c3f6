//! The apalis workers of a pool, configured around the sharp edges of
//! apalis 1.0 listed in `docs/design.md` ("How apalis is configured, and
//! why"): a unique name per process and per restart, a backend of ours
//! over each queue (the job rows, Redis), which counts the slots itself,
//! messages decoded as any JSON, and a handler that never fails or panics.
//! A worker that keeps failing (Redis or the database down) is started
//! again after a pause, for as long as the process runs: an outage never
//! ends the process, and it resumes by itself when the service returns.

use std::{sync::Arc, time::Duration};

use apalis::prelude::*;
use queue::{Consumer, Message, Queue};
use shared::retry::Retry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    Error, Result,
    backend::QueueBackend,
    claims::{ClaimedJob, job_row_backend},
    runner::{Handled, Runner},
};

/// Quick restarts of a failing apalis worker inside one monitor; after
/// that the monitor ends and [`ApalisWorkers::run_until_shutdown`] starts
/// a new one after a pause, so an outage of Redis or the database never makes a hot loop and
/// never ends the process.
const QUICK_RESTARTS: usize = 3;
/// The pause before a new monitor: it doubles while the pool keeps
/// failing, and starts over once a monitor has run for a minute.
const RESTARTS: Retry = Retry::doubling(Duration::from_millis(200), Duration::from_secs(5))
    .fresh_after(Duration::from_secs(60));

async fn handle_message(
    message: Message,
    runner: Data<Arc<Runner>>,
    consumer: Data<Option<Consumer>>,
) -> Result<(), BoxDynError> {
    // Frees the message's slot however the handler ends, and acknowledges
    // the message once it has run (the Redis queue).
    let delivery = consumer
        .as_ref()
        .map(|consumer| consumer.delivery(&message));
    match runner.run_message(message).await {
        Handled::Done(done) => {
            if let Some(delivery) = &delivery
                && done
            {
                delivery.finished();
            }
        }
        // The slot fetches and claims its next message while this outcome
        // commits; the message is acknowledged once it has.
        Handled::Ran(ran) => {
            let delivery = delivery.map(Arc::new);
            let slot = delivery.clone();
            runner
                .conclude_in_background(
                    ran,
                    move || {
                        if let Some(slot) = slot {
                            slot.free_slot();
                        }
                    },
                    move || {
                        if let Some(delivery) = delivery {
                            delivery.finished();
                        }
                    },
                )
                .await;
        }
    }
    Ok(())
}

/// Runs an attempt a claim of due jobs won (the job rows as the queue).
/// Its slot moves on once the attempt has run, while its outcome is
/// written.
async fn handle_claimed(job: ClaimedJob, runner: Data<Arc<Runner>>) -> Result<(), BoxDynError> {
    let slot = job.slot();
    let Some(ran) = runner.run_claim(job.claim, job.arrived).await else {
        return Ok(());
    };
    runner
        .conclude_in_background(ran, move || slot.free(), || {})
        .await;
    Ok(())
}

/// The apalis workers that feed a pool's [`Runner`], one monitor at a
/// time, on whichever backend the queue is.
pub struct ApalisWorkers {
    runner: Arc<Runner>,
    queue: Queue,
    concurrency: usize,
    grace: Duration,
}

impl ApalisWorkers {
    pub fn new(runner: Arc<Runner>, queue: Queue, concurrency: usize, grace: Duration) -> Self {
        Self {
            runner,
            queue,
            concurrency,
            grace,
        }
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Runs apalis monitors one after another until `shutdown`: a monitor
    /// ends when its worker keeps failing (Redis or the database is down,
    /// a message apalis cannot decode), and the next one starts after a
    /// pause. Jobs are never lost meanwhile: the outbox holds them, and the
    /// relay publishes them again.
    pub async fn run_until_shutdown(&self, shutdown: &CancellationToken) -> Result<()> {
        let ended = RESTARTS
            .run_until(
                shutdown.cancelled(),
                |try_number| async move {
                    let generation = u64::from(try_number - 1);
                    let result = self.run_generation(shutdown.clone(), generation).await;
                    if shutdown.is_cancelled() {
                        Ok(result)
                    } else {
                        Err(result)
                    }
                },
                |result, try_number| {
                    let generation = try_number - 1;
                    match result {
                        Ok(()) => warn!(generation, "the apalis workers stopped; starting them again"),
                        Err(error) => {
                            warn!(generation, %error, "the apalis workers failed; starting them again")
                        }
                    }
                    true
                },
            )
            .await;
        // A shutdown during a pause ends the run as well as one during a
        // monitor.
        ended.unwrap_or(Ok(()))
    }

    /// Hands back the attempts this worker holds that no slot runs: a
    /// claim that committed as its worker stopped taking tasks.
    async fn hand_back_unknown(&self) {
        let held = match self
            .runner
            .store
            .attempts_held_by(&self.runner.worker_id)
            .await
        {
            Ok(held) => held,
            Err(error) => {
                warn!(%error, "could not look for attempts this worker holds; their leases will lapse");
                return;
            }
        };
        let unknown: Vec<(String, i64)> = held
            .into_iter()
            .filter(|claim| !self.runner.runs_here(&claim.job_id, claim.attempt))
            .map(|claim| (claim.job_id, claim.attempt))
            .collect();
        if unknown.is_empty() {
            return;
        }
        match self.runner.store.release_attempts(&unknown).await {
            Ok(released) => info!(
                released,
                "handed back attempts claimed as the workers stopped"
            ),
            Err(error) => warn!(%error, "could not hand back attempts; their leases will lapse"),
        }
    }

    async fn run_generation(&self, shutdown: CancellationToken, generation: u64) -> Result<()> {
        let base = format!("{}-g{generation}", self.runner.worker_id);
        let runner = self.runner.clone();
        let concurrency = self.concurrency;
        // One consumer per generation (Redis): a
        // generation that ends hands back what it still holds (below), and
        // a process that dies stops its heartbeat, so its messages return
        // to the queue.
        let consumer = self.queue.consumer(base.clone(), concurrency);
        // When the shutdown began: the outcomes' wait below takes what is
        // left of its grace, so a stopping process keeps to `SHUTDOWN_GRACE`.
        let stop_began = Arc::new(std::sync::OnceLock::new());
        let signal = {
            let stop_began = stop_began.clone();
            async move {
                shutdown.cancelled().await;
                let _ = stop_began.set(tokio::time::Instant::now());
                Ok(())
            }
        };
        let handlers_consumer = consumer.clone();
        // The backends count their slots: no `.concurrency()` beside them.
        macro_rules! run_monitor {
            ($new_backend:expr, $handler:expr) => {{
                let new_backend = $new_backend;
                Monitor::new()
                    .shutdown_timeout(self.grace)
                    .should_restart(|ctx, error| {
                        warn!(worker = ctx.name(), %error, restarts = ctx.restarts(), "apalis worker failed");
                        ctx.restarts() < QUICK_RESTARTS
                    })
                    .register(move |restarts| {
                        // A new name per restart, so the logs tell every
                        // worker apart.
                        WorkerBuilder::new(format!("{base}-r{restarts}"))
                            .backend(new_backend())
                            .data(runner.clone())
                            .data(handlers_consumer.clone())
                            .catch_panic()
                            .parallelize(tokio::spawn)
                            .build($handler)
                    })
                    .run_with_signal(signal)
                    .await
                    .map_err(Error::apalis)
            }};
        }
        let result = match self.queue.clone() {
            // Claims wait for a NOTIFY, or look again after a while; the
            // backend counts the slots.
            Queue::JobRows(queue) => {
                let (runner, caps, lease) = (
                    self.runner.clone(),
                    self.runner.caps.clone(),
                    self.runner.lease(),
                );
                let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
                let result = run_monitor!(
                    move || job_row_backend(
                        runner.clone(),
                        queue.clone(),
                        slots.clone(),
                        caps.clone(),
                        lease,
                    ),
                    handle_claimed
                );
                self.hand_back_unknown().await;
                result
            }
            // Fetches wait for a push (Redis's BLPOP).
            Queue::Redis(_) => {
                let consumer = consumer
                    .clone()
                    .ok_or_else(|| Error::Apalis("a shared queue has a consumer".into()))?;
                run_monitor!(
                    move || QueueBackend::new(consumer.messages()),
                    handle_message
                )
            }
        };
        // Outcomes still being written are acknowledged when they are, not
        // handed back with what the consumer holds.
        let grace_left = stop_began.get().map_or(self.grace, |began| {
            self.grace.saturating_sub(began.elapsed())
        });
        if !self.runner.outcomes_written(grace_left).await {
            warn!(
                "outcomes still unwritten after the grace period; their attempts are handed back"
            );
        }
        if let Some(consumer) = consumer {
            match consumer.release().await {
                Ok(0) => {}
                Ok(returned) => info!(returned, "handed unstarted messages back to the queue"),
                Err(error) => {
                    warn!(%error, "could not hand messages back to the queue; they return when its heartbeat lapses")
                }
            }
        }
        result
    }
}
