//! Receipt's HTTP API (actix-web). `main.rs` reads settings and calls
//! [`run`]; tests spawn the binary and talk HTTP to it.

pub mod auth;
pub mod body;
pub mod error;
pub mod idempotency;
pub mod key_commands;
pub mod limits;
pub mod openapi;
pub mod routes;
pub mod state;

use std::sync::OnceLock;

use actix_web::{App, HttpServer, middleware::ErrorHandlers, web};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use shared::{
    batch::Batcher,
    notify::Signals,
    reports::Registry,
    settings::Settings,
    store::{Dialect, KeySync, Store, Submission, Submitted, forward_finished_notifications},
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use worker::{BoxError, Queue, WorkerPool, cancel_on_signal, run_relay};

use crate::{auth::ApiKeys, error::problem_fallback, state::AppState};

/// Body limit of every route but the ledger import (`docs/api.md`).
const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
const LEDGER_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Registers every route; shared by the server and the OpenAPI test.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use routes::{jobs, ledger, periods, reports, service, webhooks};
    // One resource per path, so a wrong method answers 405 with `Allow`.
    cfg.service(web::resource("/healthz").get(service::healthz))
        .service(web::resource("/readyz").get(service::readyz))
        .service(web::resource("/metrics").get(service::metrics))
        .service(web::resource("/openapi.json").get(service::openapi))
        .service(
            web::scope("/v1")
                .app_data(web::PayloadConfig::new(DEFAULT_BODY_LIMIT))
                .service(web::resource("/reports/{kind}").post(reports::submit))
                .service(web::resource("/jobs").get(jobs::list))
                .service(web::resource("/jobs/{job_id}").get(jobs::get))
                .service(web::resource("/jobs/{job_id}/result").get(jobs::result))
                .service(web::resource("/jobs/{job_id}/cancel").post(jobs::cancel))
                .service(
                    web::resource("/webhooks")
                        .post(webhooks::register)
                        .get(webhooks::list),
                )
                .service(
                    web::resource("/webhooks/{webhook_id}")
                        .get(webhooks::get)
                        .delete(webhooks::delete),
                )
                .service(
                    web::resource("/webhooks/{webhook_id}/deliveries").get(webhooks::deliveries),
                )
                .service(
                    web::resource("/filing-endpoint")
                        .put(periods::put_filing_endpoint)
                        .get(periods::get_filing_endpoint),
                )
                .service(web::resource("/periods/{month}").get(periods::get_period))
                .service(web::resource("/periods/{month}/reopen").post(periods::reopen_period))
                .service(
                    web::resource("/ledger/entries")
                        .app_data(web::PayloadConfig::new(LEDGER_BODY_LIMIT))
                        .post(ledger::import),
                ),
        );
}

fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}

/// Makes the stored keys match `API_KEYS` when it is set (the complete
/// list: every other key is revoked); with it unset and no key stored at
/// all, makes a key for tenant `default` and prints it, once.
async fn ensure_api_keys(
    store: &Store,
    configured: &[(String, String)],
    public_addr: &str,
) -> Result<(), BoxError> {
    if !configured.is_empty() {
        let sync = store.sync_configured_api_keys(configured).await?;
        if sync != KeySync::default() {
            info!(
                added = sync.added,
                moved = sync.moved,
                restored = sync.restored,
                revoked = sync.revoked,
                "stored API keys now match API_KEYS"
            );
        }
        return Ok(());
    }
    // Revoked keys count: revoking every key must not mint a new one.
    if store.count_api_keys().await? == 0 {
        let key = store.create_api_key("default").await?.key;
        println!("API key: {key}");
        println!(
            "Try: curl -s -H 'Authorization: Bearer {key}' -H 'content-type: application/json' -d '{{\"month\":\"2026-10\"}}' http://{public_addr}/v1/reports/gst-summary"
        );
    } else if store.valid_api_keys().await?.1.is_empty() {
        println!(
            "API key: none is valid (all are revoked); `api keys create --tenant T` makes one"
        );
    } else {
        println!(
            "API key: (made at first start and printed then; `api keys create --tenant T` makes another)"
        );
    }
    Ok(())
}

/// Submits per group commit (see `idempotency::execute_submit`).
const SUBMIT_BATCH: usize = 64;

/// How long an idle keep-alive connection stays open. Longer than the idle
/// timeout of clients' pools and of load balancers (60 s is common), so
/// that the client closes it, never the server while a request is on its
/// way: actix's default of 5 s lost one request in about 20,000 in the
/// benchmark's open loop ("connection closed before message completed").
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);

/// What a group commit of submits needs.
#[derive(Clone)]
struct SubmitGroup {
    store: Store,
    queue: Queue,
    signals: Signals,
    republish_after_ms: i64,
}

impl SubmitGroup {
    /// Commits a batch of submits, then publishes its new jobs at once,
    /// saving the relay a transaction per batch: into the embedded queue
    /// (room reserved before the commit; with none, the relay takes them
    /// later), or to Redis in a task of its own, so a slow Redis holds up
    /// no answer (if that push fails, the rows are made due for the relay).
    /// Their outbox rows are written as published, so they are published
    /// again only if not claimed in time, like any other.
    async fn write(&self, submissions: Vec<Submission>) -> shared::Result<Vec<Submitted>> {
        let room = self.queue.reserve(submissions.len());
        let direct = room.is_some() || self.queue.is_redis();
        let outcomes = self
            .store
            .submit_batch(&submissions, direct.then_some(self.republish_after_ms))
            .await?;
        let new_jobs: Vec<String> = submissions
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| **outcome == Submitted::Inserted)
            .map(|(submission, _)| submission.job.job_id.clone())
            .collect();
        if new_jobs.is_empty() {
            return Ok(outcomes);
        }
        match room {
            Some(room) => room.send(&new_jobs),
            None if direct => {
                let group = self.clone();
                tokio::spawn(async move {
                    if let Err(error) = group.queue.publish(&new_jobs).await {
                        warn!(%error, count = new_jobs.len(), "publishing new jobs failed; the relay will");
                        let soon = shared::time::now_ms() + 1_000;
                        if let Err(error) = group.store.retry_outbox_soon(&new_jobs, soon).await {
                            warn!(%error, "could not hand the jobs to the relay; republished later");
                        }
                    }
                });
            }
            None => self.signals.outbox_changed(),
        }
        Ok(outcomes)
    }
}

/// Runs the API (and, when embedded, the worker pool) until SIGTERM/SIGINT.
pub async fn run(settings: Settings) -> Result<(), BoxError> {
    let configured_keys = settings.api_keys()?;
    let store = Store::connect(&settings.database_url).await?;
    store.migrate().await?;
    let queue = if settings.embedded_worker() {
        Queue::connect_in_process(&settings, &store).await?
    } else {
        Queue::connect(&settings, &store).await?
    };
    let signals = Signals::default();
    let listener = std::net::TcpListener::bind(&settings.bind_addr)
        .map_err(|e| format!("cannot listen on {}: {e}", settings.bind_addr))?;
    let addr = listener.local_addr()?;
    ensure_api_keys(&store, &configured_keys, &addr.to_string()).await?;
    let keys = ApiKeys::load(&store).await?;

    let submits = {
        let group = SubmitGroup {
            store: store.clone(),
            queue: queue.clone(),
            signals: signals.clone(),
            republish_after_ms: shared::time::duration_ms(settings.republish_after),
        };
        Batcher::spawn(SUBMIT_BATCH, move |submissions: Vec<Submission>| {
            let group = group.clone();
            async move { group.write(submissions).await }
        })
    };
    let shutdown = CancellationToken::new();
    let state = web::Data::new(AppState {
        store: store.clone(),
        submits,
        queue: queue.clone(),
        registry: Registry::new(settings.enable_diagnostic_kinds),
        signals: signals.clone(),
        keys: keys.clone(),
        limits: limits::Limits::new(&settings),
        metrics: prometheus(),
        idempotency_ttl: settings.idempotency_ttl,
        webhook_allow_private: settings.webhook_allow_private,
        shutdown: shutdown.clone(),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(ErrorHandlers::new().default_handler(problem_fallback))
            .wrap(actix_web::middleware::from_fn(count_requests))
            .configure(configure)
    })
    .disable_signals()
    .keep_alive(KEEP_ALIVE)
    .shutdown_timeout(settings.shutdown_grace.as_secs().max(1))
    .listen(listener)?
    .run();
    let server_handle = server.handle();
    println!("listening on http://{addr}");

    tokio::spawn(cancel_on_signal(shutdown.clone()));
    if store.dialect() == Dialect::Postgres {
        tokio::spawn(forward_finished_notifications(
            store.url().to_owned(),
            signals.clone(),
        ));
    }
    let mut pool = if settings.embedded_worker() {
        let pool = WorkerPool::new(store.clone(), queue.clone(), signals.clone(), &settings);
        Some(tokio::spawn(pool.run(shutdown.clone())))
    } else {
        tokio::spawn(run_relay(
            store.clone(),
            queue.clone(),
            signals.clone(),
            settings.republish_after,
            shutdown.clone(),
        ));
        None
    };
    tokio::spawn(sweep_idempotency_keys(store.clone(), shutdown.clone()));
    tokio::spawn(keys.clone().keep_fresh(store.clone(), shutdown.clone()));
    info!(%addr, embedded_worker = pool.is_some(), "api started");

    let server = tokio::spawn(server);
    // Until SIGTERM/SIGINT, or until the embedded pool ends on its own
    // (it only does when it cannot start).
    let ended_early = match &mut pool {
        Some(running) => tokio::select! {
            result = running => Some(result),
            () = shutdown.cancelled() => None,
        },
        None => {
            shutdown.cancelled().await;
            None
        }
    };
    shutdown.cancel();
    // The server stops taking requests and finishes those in flight (long
    // polls answer at once) while the pool finishes its running jobs: both
    // within SHUTDOWN_GRACE, side by side.
    let stop_server = async {
        server_handle.stop(true).await;
        let _ = server.await;
        // The last minute's key uses; a database that does not answer
        // soon does not hold up the exit for them.
        let flush = keys.flush_uses(&store);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), flush).await;
    };
    let drain_pool = async {
        let result = match (ended_early, pool) {
            (Some(result), _) => result,
            (None, Some(running)) => running.await,
            (None, None) => Ok(Ok(())),
        };
        result
            .map_err(|e| -> BoxError { Box::new(e) })
            .and_then(|r| r)
    };
    let ((), pool_result) = tokio::join!(stop_server, drain_pool);
    if let Err(error) = &pool_result {
        warn!(%error, "the embedded worker pool stopped");
    }
    // A job still running past the grace may hold a connection: do not
    // wait for it.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), store.close()).await;
    pool_result
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

/// The `method` label of a request: one of the standard methods, or
/// `other`. A client chooses the method, and each label value is a series
/// kept for the life of the process, so only a bounded set may appear.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

async fn count_requests(
    request: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = method_label(request.method());
    let response = next.call(request).await?;
    // The route's pattern, never the path: paths are the client's to make
    // up, patterns are the few this server registers.
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = response.status().as_u16().to_string();
    metrics::counter!("receipt_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("receipt_http_request_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    Ok(response)
}
