use actix_web::{FromRequest, HttpRequest, HttpResponse, http::header, web};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::{auth::Caller, error::ApiError, state::AppState};

/// The answer of `/healthz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "service", operation_id = "healthz",
    responses((status = 200, body = Health, description = "the process is up")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health { status: "ok" })
}

/// The database and the queue answer.
#[utoipa::path(get, path = "/readyz", tag = "service", operation_id = "readyz",
    responses(
        (status = 200, body = Object, description = "the database and the queue answer: {\"status\": \"ready\", ...}"),
        (status = 503, description = "the database or the queue does not answer; `detail` says which"),
    ))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // Which dependency is down is for the caller; why (a driver's error
    // text, addresses) is for the log only.
    let (database, queue) = readiness(&state).await;
    if let Err(error) = database {
        tracing::warn!(%error, "readiness: the database does not answer");
        return Err(ApiError::Unavailable("the database does not answer".into()));
    }
    if let Err(error) = queue {
        tracing::warn!(%error, "readiness: the queue does not answer");
        return Err(ApiError::Unavailable("the queue does not answer".into()));
    }
    Ok(HttpResponse::Ok().json(json!({"status": "ready", "database": "ok", "queue": "ok"})))
}

/// Pings the database and the queue at once, each within
/// [`PING_TIMEOUT`], and sets `receipt_ready{dependency}` to what each
/// answered (1 or 0), so that a scrape carries what `/readyz` would say.
async fn readiness(state: &AppState) -> (Result<(), String>, Result<(), String>) {
    let (database, queue) = tokio::join!(
        within(PING_TIMEOUT, state.store.ping()),
        within(PING_TIMEOUT, state.queue.ping()),
    );
    for (dependency, answer) in [("database", &database), ("queue", &queue)] {
        ::metrics::gauge!("receipt_ready", "dependency" => dependency).set(if answer.is_ok() {
            1.0
        } else {
            0.0
        });
    }
    (database, queue)
}

/// How long a readiness check waits for each dependency.
const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

async fn within<E: std::fmt::Display>(
    limit: std::time::Duration,
    ping: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    match tokio::time::timeout(limit, ping).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "service", operation_id = "metrics",
    responses((status = 200, content_type = "text/plain", body = String, description = "Prometheus text format 0.0.4")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    // For `receipt_ready`; a failure is the gauge's to report, not the log's.
    let _ = readiness(&state).await;
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/plain; version=0.0.4"))
        .body(state.metrics.render())
}

/// This document. With a key (optional), it also holds the kinds the key's
/// tenant registered, among the bodies of a submit.
#[utoipa::path(get, path = "/openapi.json", tag = "service", operation_id = "openapi",
    responses(
        (status = 200, body = Object, description = "the OpenAPI 3.1 document; with a key, the tenant's registered kinds are among a submit's bodies (`Registered.<name>`)"),
        (status = 401, description = "a key was sent and is not valid"),
    ))]
pub async fn openapi(
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let mut document = state.openapi.clone();
    if request.headers().contains_key(header::AUTHORIZATION) {
        let caller = Caller::extract(&request).await?;
        let kinds: Vec<_> = state
            .store
            .registered_kinds(&caller.tenant_id)
            .await?
            .into_iter()
            .filter(|kind| kind.deleted_at.is_none())
            .collect();
        if !kinds.is_empty() {
            document = crate::openapi::for_tenant(&document, &kinds)
                .map_err(|e| ApiError::Internal(format!("the tenant's OpenAPI document: {e}")))?
                .into();
        }
    }
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(document))
}
