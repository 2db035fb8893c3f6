//! The `worker` process around its pool: connecting, the metrics
//! endpoint on `METRICS_ADDR`, and SIGTERM/SIGINT.

use std::time::Duration;

use queue::Queue;
use shared::{notify::Signals, retry::Retry, settings::Settings};
use store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{Error, Result, WorkerPool};

/// How a worker started while Postgres or Redis is down or refusing it
/// waits for them: as it would for an outage once running, rather than exit.
const STARTING: Retry = Retry::doubling(Duration::from_millis(200), Duration::from_secs(5));

/// The `worker` binary: connect, migrate, run the pool until SIGTERM/SIGINT.
pub async fn run_worker_process(settings: Settings) -> Result<()> {
    reports::Registry::check_caps(&settings.caps()).map_err(store::Error::Config)?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let (store, queue) = STARTING
        .run_until(
            shutdown.cancelled(),
            |_| async {
                let store = Store::open(&settings).await?;
                store.migrate().await?;
                // Its dispatcher and filing calls open secrets: a master
                // key missing or wrong stops the start, not each delivery.
                store.check_keyring().await?;
                let queue = Queue::connect(&settings, &store).await?;
                Ok::<_, Error>((store, queue))
            },
            |error, _| {
                let again = error.is_unavailable();
                if again {
                    warn!(%error, "cannot start yet: trying again");
                }
                again
            },
        )
        .await?;
    let metrics = match &settings.metrics_addr {
        Some(addr) => Some(serve_metrics(addr, settings.metrics_sample_interval)?),
        None => None,
    };
    let pool = WorkerPool::new(store, queue, Signals::default(), &settings);
    let result = pool.run(shutdown).await;
    if let Some(metrics) = metrics {
        metrics.stop(true).await;
    }
    result
}

/// Serves `GET /metrics` (Prometheus text) on `addr` and prints
/// `metrics on http://{addr}` once it listens.
fn serve_metrics(addr: &str, sample_every: Duration) -> Result<actix_web::dev::ServerHandle> {
    use actix_web::{App, HttpResponse, HttpServer, http::header, web};
    let handle = telemetry::metrics::install(sample_every);
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
