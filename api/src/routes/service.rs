use actix_web::{HttpResponse, http::header, web};
use serde_json::json;
use utoipa::OpenApi;

use crate::{error::ApiError, openapi::ApiDoc, state::AppState};

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "service", responses((status = 200)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The database and the queue answer.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses((status = 200), (status = 503, description = "a dependency is down")))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state
        .store
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the database does not answer: {e}")))?;
    state
        .queue
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the queue does not answer: {e}")))?;
    Ok(HttpResponse::Ok().json(json!({"status": "ready", "database": "ok", "queue": "ok"})))
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, content_type = "text/plain", body = String)))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/plain; version=0.0.4"))
        .body(state.metrics.render())
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "service", responses((status = 200)))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}
