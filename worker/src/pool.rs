//! The apalis worker pool, configured around the sharp edges of apalis 1.0
//! listed in `docs/design.md` ("apalis 1.0: what we rely on and work
//! around"): a unique name per process and per restart, `QUEUE_PREFETCH`
//! messages per fetch (1 by default), an explicit queue and poll interval,
//! messages decoded as any JSON, and a handler that never fails or panics.
//! A worker that keeps failing (Redis or the database down) is started
//! again after a pause, for as long as the process runs: an outage never
//! ends the process, and it resumes by itself when the service returns.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use apalis::prelude::*;
use queue::{Consumer, Message, Queue, run_relay};
use shared::{notify::Signals, settings::Settings, store::Store};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    Dispatcher, Error, Result,
    retention::{run_pruner, run_queue_vacuum},
    runner::Runner,
    sweeper::run_sweeper,
};

/// How often an idle worker of apalis's SQL storages looks for new messages
/// (apalis otherwise waits for its heartbeat, seconds).
const POLL: Duration = Duration::from_millis(20);
/// Wakes an idle worker every [`POLL`]. apalis's own `poll_with_interval`
/// re-arms its timer without polling it, so when a fetch completes at once
/// nothing wakes the worker again until its next heartbeat (seconds of
/// pickup latency); this strategy registers the next tick before it reports
/// this one. It also wakes at once on a publish by this process's relay,
/// instead of at the next tick.
struct PollEvery {
    every: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    published: Arc<tokio::sync::Notify>,
    woken: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// A publish seen while registering for the next one: reported on the
    /// next call (a finished future must never be polled again).
    wake_pending: bool,
}

impl std::fmt::Debug for PollEvery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollEvery")
            .field("every", &self.every)
            .finish()
    }
}

impl PollEvery {
    fn new(every: Duration, published: Arc<tokio::sync::Notify>) -> Self {
        Self {
            every,
            timer: None,
            published,
            woken: None,
            wake_pending: false,
        }
    }
}

impl Clone for PollEvery {
    fn clone(&self) -> Self {
        Self::new(self.every, self.published.clone())
    }
}

impl PollStrategy for PollEvery {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        if std::mem::take(&mut self.wake_pending) {
            return Poll::Ready(Some(()));
        }
        let published = self.published.clone();
        let woken = self
            .woken
            .get_or_insert_with(|| Box::pin(async move { published.notified().await }));
        if woken.as_mut().poll(cx).is_ready() {
            let published = self.published.clone();
            let mut next: Pin<Box<dyn Future<Output = ()> + Send + Sync>> =
                Box::pin(async move { published.notified().await });
            // Register for the next publish before reporting this one; if
            // that one is already here, report it next time.
            if next.as_mut().poll(cx).is_ready() {
                self.woken = None;
                self.wake_pending = true;
            } else {
                self.woken = Some(next);
            }
            return Poll::Ready(Some(()));
        }
        let every = self.every;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        timer.as_mut().reset(tokio::time::Instant::now() + every);
        // Polling the re-armed timer is what schedules the next wake-up.
        let _ = timer.as_mut().poll(cx);
        Poll::Ready(Some(()))
    }
}

/// Quick restarts of a failing apalis worker inside one monitor; after
/// that the monitor ends and [`WorkerPool::run`] starts a new one after a
/// pause, so an outage of Redis or the database never makes a hot loop and
/// never ends the process.
const QUICK_RESTARTS: usize = 3;
/// The pause before a new monitor: it doubles from the first to the last
/// while the pool keeps failing, and starts over once a monitor has run
/// for a minute.
const RESTART_PAUSE: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

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
    runner.handle(message).await;
    if let Some(delivery) = &delivery {
        delivery.finished();
    }
    Ok(())
}

/// A worker pool with its relay, lease sweeper, webhook dispatcher,
/// retention pruner and queue vacuum.
pub struct WorkerPool {
    pub runner: Arc<Runner>,
    queue: Queue,
    queue_name: String,
    concurrency: usize,
    grace: Duration,
    republish_after: Duration,
    sweep_every: Duration,
    job_retention: Duration,
    dispatcher: Dispatcher,
}

impl WorkerPool {
    pub fn new(store: Store, queue: Queue, signals: Signals, settings: &Settings) -> Self {
        let worker_id = format!(
            "{}-{}-{}",
            settings.queue_name,
            std::process::id(),
            ulid::Ulid::generate()
        );
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
            dispatcher: Dispatcher::new(store.clone(), settings),
            runner: Arc::new(Runner::new(store, signals, settings, worker_id)),
            queue,
            queue_name: Queue::apalis_queue_name(settings),
            concurrency: settings.worker_concurrency(),
            grace: settings.shutdown_grace,
            republish_after: settings.republish_after,
            sweep_every: (settings.job_lease / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(5)),
            job_retention: settings.job_retention,
        }
    }

    /// Runs the relay, the sweeper, the dispatcher, the pruner, the queue
    /// vacuum and the apalis workers until `shutdown` is cancelled, then
    /// drains for the grace period.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let store = self.runner.store.clone();
        let signals = self.runner.signals.clone();
        self.queue.recover(&store).await?;
        let stopping = {
            let (runner, shutdown) = (self.runner.clone(), shutdown.clone());
            tokio::spawn(async move {
                shutdown.cancelled().await;
                runner.stopping.cancel();
            })
        };
        let background = CancellationToken::new();
        let relay = tokio::spawn(run_relay(
            store.clone(),
            self.queue.clone(),
            signals.clone(),
            self.republish_after,
            background.clone(),
        ));
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
        let vacuum = tokio::spawn(run_queue_vacuum(
            self.queue.clone(),
            self.queue_name.clone(),
            background.clone(),
        ));
        info!(worker_id = self.runner.worker_id, concurrency = self.concurrency, queue = ?self.queue, "worker pool started");
        let result = self.run_apalis_until_shutdown(&shutdown).await;
        background.cancel();
        stopping.abort();
        let _ = tokio::join!(relay, sweeper, dispatcher, pruner, vacuum);
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

    /// Runs apalis monitors one after another until `shutdown`: a monitor
    /// ends when its worker keeps failing (Redis or the database is down,
    /// a message apalis cannot decode), and the next one starts after a
    /// pause. Jobs are never lost meanwhile: the outbox holds them, and the
    /// relay publishes them again.
    async fn run_apalis_until_shutdown(&self, shutdown: &CancellationToken) -> Result<()> {
        let mut pause = RESTART_PAUSE.0;
        for generation in 0.. {
            let started = std::time::Instant::now();
            let result = self.run_apalis(shutdown.clone(), generation).await;
            if shutdown.is_cancelled() {
                return result;
            }
            match result {
                Ok(()) => warn!(
                    generation,
                    "the apalis workers stopped; starting them again"
                ),
                Err(error) => {
                    warn!(generation, %error, "the apalis workers failed; starting them again")
                }
            }
            if started.elapsed() > Duration::from_secs(60) {
                pause = RESTART_PAUSE.0;
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(RESTART_PAUSE.1);
        }
        Ok(())
    }

    async fn run_apalis(&self, shutdown: CancellationToken, generation: u64) -> Result<()> {
        let base = format!("{}-g{generation}", self.runner.worker_id);
        let runner = self.runner.clone();
        let concurrency = self.concurrency;
        let published = self.runner.signals.published_notify();
        // One Redis consumer per generation: a generation that ends hands
        // back what it still holds (below), and a process that dies stops
        // its heartbeat, so its messages return to the queue.
        let consumer = self
            .queue
            .redis()
            .map(|queue| queue.consumer(base.clone(), concurrency));
        let signal = async move {
            shutdown.cancelled().await;
            Ok(())
        };
        let handlers_consumer = consumer.clone();
        macro_rules! run_monitor {
            ($new_backend:expr) => {{
                let new_backend = $new_backend;
                Monitor::new()
                    .shutdown_timeout(self.grace)
                    .should_restart(|ctx, error| {
                        warn!(worker = ctx.name(), %error, restarts = ctx.restarts(), "apalis worker failed");
                        ctx.restarts() < QUICK_RESTARTS
                    })
                    .register(move |restarts| {
                        // A new name per restart: apalis refuses a name it
                        // saw within the heartbeat window (docs/design.md,
                        // apalis 1.0, item 7).
                        WorkerBuilder::new(format!("{base}-r{restarts}"))
                            .backend(new_backend())
                            .data(runner.clone())
                            .data(handlers_consumer.clone())
                            .concurrency(concurrency)
                            .catch_panic()
                            .parallelize(tokio::spawn)
                            .build(handle_message)
                    })
                    .run_with_signal(signal)
                    .await
                    .map_err(Error::apalis)
            }};
        }
        let result = match self.queue.clone() {
            // Fetches block on Redis for a push: no polling.
            Queue::Redis(_) => {
                let consumer = consumer
                    .clone()
                    .ok_or_else(|| Error::Apalis("a Redis queue has a consumer".into()))?;
                run_monitor!(move || consumer.storage())
            }
            Queue::Sqlite(storage) => {
                let backend = storage.poll_with_strategy(PollEvery::new(POLL, published.clone()));
                run_monitor!(move || backend.clone())
            }
            Queue::Postgres(storage) => {
                let backend = storage.poll_with_strategy(PollEvery::new(POLL, published.clone()));
                run_monitor!(move || backend.clone())
            }
            // A channel wakes its reader when a message arrives: no polling.
            Queue::Memory(queue) => run_monitor!(move || queue.storage()),
        };
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

/// The `worker` binary: connect, migrate, run the pool until SIGTERM/SIGINT.
pub async fn run_worker_process(settings: Settings) -> Result<()> {
    let store = Store::connect(&settings.database_url).await?;
    store.migrate().await?;
    let queue = Queue::connect(&settings, &store).await?;
    let metrics = match &settings.metrics_addr {
        Some(addr) => Some(serve_metrics(addr)?),
        None => None,
    };
    let pool = WorkerPool::new(store, queue, Signals::default(), &settings);
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let result = pool.run(shutdown).await;
    if let Some(metrics) = metrics {
        metrics.stop(true).await;
    }
    result
}

/// Serves `GET /metrics` (Prometheus text) on `addr` and prints
/// `metrics on http://{addr}` once it listens.
fn serve_metrics(addr: &str) -> Result<actix_web::dev::ServerHandle> {
    use actix_web::{App, HttpResponse, HttpServer, http::header, web};
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Error::Metrics {
            addr: addr.to_owned(),
            detail: format!("cannot install the recorder: {e}"),
        })?;
    let metrics_error = |e: std::io::Error| Error::Metrics {
        addr: addr.to_owned(),
        detail: e.to_string(),
    };
    let listener = std::net::TcpListener::bind(addr).map_err(metrics_error)?;
    let bound = listener.local_addr().map_err(metrics_error)?;
    let server = HttpServer::new(move || {
        let handle = handle.clone();
        App::new().route(
            "/metrics",
            web::get().to(move || {
                let body = handle.render();
                async move {
                    HttpResponse::Ok()
                        .insert_header((header::CONTENT_TYPE, "text/plain; version=0.0.4"))
                        .body(body)
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .map_err(metrics_error)?
    .run();
    let stop = server.handle();
    tokio::spawn(server);
    println!("metrics on http://{bound}");
    Ok(stop)
}

/// Cancels the token on SIGTERM or SIGINT.
pub async fn cancel_on_signal(token: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            warn!(%error, "cannot listen for SIGTERM");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
    token.cancel();
}
