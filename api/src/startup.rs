//! Building the server and running it until SIGTERM/SIGINT.

use std::net::SocketAddr;

use actix_web::{App, HttpServer, dev::Server, middleware::ErrorHandlers, web};
use queue::Queue;
use reports::Registry;
use shared::{notify::Signals, settings::Settings};
use store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use utoipa::OpenApi;
use worker::cancel_on_signal;

use crate::{
    api_keys::ApiKeys,
    background::BackgroundTasks,
    deadline,
    error::{BoxError, problem_fallback},
    key_commands::ensure_api_keys,
    limits::Limits,
    metrics,
    openapi::ApiDoc,
    request_id, routes,
    state::AppState,
    submits, traces,
};

/// How long an idle keep-alive connection stays open. Longer than the idle
/// timeout of clients' pools and of load balancers (60 s is common), so
/// that the client closes it, never the server while a request is on its
/// way: a pooled client that sends a request into a connection the server
/// is closing gets no answer ("connection closed before message
/// completed"), and cannot know whether the request was taken.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);

/// Seals the secrets a release before stored in clear (during a rolling
/// upgrade, its api may still be writing some: `api secrets rotate` seals
/// those).
async fn seal_clear_secrets(store: &Store) -> Result<(), BoxError> {
    let report = store
        .seal_clear_secrets(crate::secret_commands::BATCH)
        .await?;
    if report.sealed > 0 {
        info!(
            sealed = report.sealed,
            master_key = report.master_fingerprint,
            "sealed the secrets stored in clear"
        );
    }
    Ok(())
}

/// An api bound to its address, migrated and with its keys in place, not
/// yet serving.
pub struct Application {
    addr: SocketAddr,
    server: Server,
    settings: Settings,
    store: Store,
    queue: Queue,
    signals: Signals,
    keys: ApiKeys,
    shutdown: CancellationToken,
}

impl Application {
    /// Connects to the database (and migrates it) and to the queue, binds
    /// `BIND_ADDR` (port 0 takes a free port: see [`Application::port`]),
    /// and makes or matches the API keys.
    pub async fn build(settings: Settings) -> Result<Self, BoxError> {
        let configured_keys = settings.api_keys()?;
        reports::Registry::check_caps(&settings.caps())?;
        let store = Store::open(&settings).await?;
        store.migrate().await?;
        store.check_keyring().await?;
        seal_clear_secrets(&store).await?;
        let queue = Queue::connect(&settings, &store).await?;
        let signals = Signals::default();
        let listener = std::net::TcpListener::bind(&settings.bind_addr)
            .map_err(|e| format!("cannot listen on {}: {e}", settings.bind_addr))?;
        let addr = listener.local_addr()?;
        ensure_api_keys(&store, &configured_keys, &addr.to_string()).await?;
        let keys = ApiKeys::load(&store).await?;

        let shutdown = CancellationToken::new();
        let state = web::Data::new(AppState {
            store: store.clone(),
            submits: submits::spawn_batcher(store.clone(), queue.clone()),
            queue: queue.clone(),
            registry: Registry::new(settings.enable_diagnostic_kinds),
            signals: signals.clone(),
            keys: keys.clone(),
            limits: Limits::new(&settings),
            metrics: telemetry::metrics::install(settings.metrics_sample_interval),
            idempotency_ttl: settings.idempotency_ttl,
            caps: settings.caps(),
            webhook_allow_private: settings.webhook_allow_private,
            openapi: serde_json::to_vec(&ApiDoc::openapi())?.into(),
            work: routes::work::WorkSettings {
                lease: settings.job_lease,
                retry_base: settings.retry_base_delay,
                retry_max: settings.retry_max_delay,
                woken: std::sync::Arc::new(tokio::sync::Notify::new()),
                look: store.lease_look(),
            },
            schemas: reports::registered::CompiledSchemas::default(),
            shutdown: shutdown.clone(),
            request_timeout: settings.request_timeout,
            keys_configured: !configured_keys.is_empty(),
        });
        {
            let (store, woken, stop) = (
                store.clone(),
                state.work.woken.clone(),
                shutdown.clone().cancelled_owned(),
            );
            tokio::spawn(async move { store.forward_due_wakes(woken, stop).await });
        }
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(ErrorHandlers::new().default_handler(problem_fallback))
                .wrap(actix_web::middleware::from_fn(metrics::count_requests))
                .wrap(actix_web::middleware::from_fn(traces::trace_requests))
                .wrap(actix_web::middleware::from_fn(deadline::bound_requests))
                .wrap(actix_web::middleware::from_fn(request_id::assign))
                .configure(routes::configure)
        })
        .disable_signals()
        .keep_alive(KEEP_ALIVE)
        .shutdown_timeout(settings.shutdown_grace.as_secs().max(1))
        .listen(listener)?
        .run();
        Ok(Self {
            addr,
            server,
            settings,
            store,
            queue,
            signals,
            keys,
            shutdown,
        })
    }

    /// The port the server is bound to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Serves, with the background tasks (and, when embedded, the worker
    /// pool), until SIGTERM/SIGINT or until the embedded pool ends on its
    /// own; then drains both within `SHUTDOWN_GRACE`.
    pub async fn run_until_stopped(self) -> Result<(), BoxError> {
        let (addr, shutdown) = (self.addr, self.shutdown);
        let server_handle = self.server.handle();
        println!("listening on http://{addr}");

        tokio::spawn(cancel_on_signal(shutdown.clone()));
        let background = BackgroundTasks::start(
            &self.settings,
            &self.store,
            &self.queue,
            &self.signals,
            &self.keys,
            &shutdown,
        );
        info!(%addr, embedded_worker = background.runs_embedded_pool(), "api started");

        let server = tokio::spawn(self.server);
        let (store, keys) = (self.store, self.keys);
        // The server stops taking requests and finishes those in flight
        // (long polls answer at once) while the pool finishes its running
        // jobs: both within SHUTDOWN_GRACE, side by side.
        let stop_server = async {
            shutdown.cancelled().await;
            server_handle.stop(true).await;
            let _ = server.await;
            // The last minute's key uses; a database that does not answer
            // soon does not hold up the exit for them.
            let flush = keys.flush_uses(&store);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), flush).await;
        };
        let ((), pool_result) =
            tokio::join!(stop_server, background.run_until_stopped(shutdown.clone()));
        if let Err(error) = &pool_result {
            warn!(%error, "the embedded worker pool stopped");
        }
        // A job still running past the grace may hold a connection: do not
        // wait for it.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), store.close()).await;
        pool_result
    }
}
