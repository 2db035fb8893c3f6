//! Months that `period-close` jobs lock and close, and the filing endpoint
//! those jobs file with (`docs/api.md`, Closing a month).

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use outbound::check_url;
use serde::Deserialize;
use shared::{calendar::Month, ledger::FieldError, time::to_rfc3339};
use store::{FilingEndpoint, Period, ReopenOutcome};
use utoipa::ToSchema;

pub use shared::objects::{FilingEndpointObject, PeriodObject};

use crate::{
    auth::{Tenant, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, RequestBody, execute},
    state::AppState,
};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutFilingEndpoint {
    /// An `http` or `https` URL on a public address.
    #[schema(example = "https://filing.example.com/returns")]
    pub url: String,
}

/// The filing endpoint as the API shows it; its secret only with
/// `with_secret` (the answer to a `PUT`).
fn filing_endpoint_object(endpoint: &FilingEndpoint, with_secret: bool) -> FilingEndpointObject {
    FilingEndpointObject {
        url: endpoint.url.clone(),
        secret: with_secret.then(|| endpoint.secret.clone()),
        created_at: to_rfc3339(endpoint.created_at),
        updated_at: to_rfc3339(endpoint.updated_at),
    }
}

/// A month as the API shows it: `open` when nothing is stored of it.
fn period_object(month: &str, period: Option<&Period>) -> PeriodObject {
    match period {
        None => PeriodObject {
            month: month.to_owned(),
            state: "open".into(),
            job_id: None,
            locked_at: None,
            closed_at: None,
            filing_reference: None,
        },
        Some(p) => PeriodObject {
            month: p.month.clone(),
            state: p.state.clone(),
            job_id: Some(p.job_id.clone()),
            locked_at: Some(to_rfc3339(p.locked_at)),
            closed_at: p.closed_at.map(to_rfc3339),
            filing_reference: p.filing_reference.clone(),
        },
    }
}

/// Register or move the tenant's filing endpoint.
#[utoipa::path(
    put, path = "/v1/filing-endpoint", tag = "periods", operation_id = "putFilingEndpoint",
    request_body = PutFilingEndpoint,
    responses(
        (status = 200, body = FilingEndpointObject, description = "registered; `secret` is in every answer to a PUT, and the same until the endpoint is registered anew"),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown or missing field"),
        (status = 413, description = "body over 1 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "bad URL (not http(s), a host that does not resolve in time, or not a public address)"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn put_filing_endpoint(
    tenant: Tenant<scope::Manage>,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let put: PutFilingEndpoint = json_body(&request, &body)?;
    // The webhooks' guard: checked here, and again at each request.
    if let Err(message) = check_url(&put.url, state.webhook_allow_private).await {
        return Err(ApiError::Validation {
            detail: "the filing endpoint is not valid".into(),
            errors: vec![FieldError::new("url", message)],
        });
    }
    let endpoint = state
        .store
        .put_filing_endpoint(&tenant.0, &put.url, &tenant.actor())
        .await?;
    Ok(HttpResponse::Ok().json(filing_endpoint_object(&endpoint, true)))
}

/// The tenant's filing endpoint (without its secret).
#[utoipa::path(
    get, path = "/v1/filing-endpoint", tag = "periods", operation_id = "getFilingEndpoint",
    responses(
        (status = 200, body = FilingEndpointObject),
        (status = 404, description = "none is registered"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get_filing_endpoint(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let endpoint = state
        .store
        .get_filing_endpoint(&tenant.0)
        .await?
        .ok_or_else(|| ApiError::NotFound("no filing endpoint is registered".into()))?;
    Ok(HttpResponse::Ok().json(filing_endpoint_object(&endpoint, false)))
}

/// The month of a path, in its canonical text.
fn checked_month(month: &str) -> ApiResult<String> {
    Month::parse(month)
        .map(|month| month.to_string())
        .ok_or_else(|| ApiError::validation("month", "must be a month written YYYY-MM"))
}

/// A month's state.
#[utoipa::path(
    get, path = "/v1/periods/{month}", tag = "periods", operation_id = "getPeriod",
    params(("month" = String, Path, description = "YYYY-MM")),
    responses(
        (status = 200, body = PeriodObject),
        (status = 422, description = "not a month written YYYY-MM"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get_period(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    month: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let month = checked_month(&month)?;
    let period = state.store.get_period(&tenant.0, &month).await?;
    Ok(HttpResponse::Ok().json(period_object(&month, period.as_ref())))
}

/// Reopen a closed month: imports into it are accepted again, and it may
/// be closed again by a new period-close. Reopening an open month changes
/// nothing.
#[utoipa::path(
    post, path = "/v1/periods/{month}/reopen", tag = "periods", operation_id = "reopenPeriod",
    params(("month" = String, Path, description = "YYYY-MM")),
    responses(
        (status = 200, body = PeriodObject, description = "the month, now open"),
        (status = 400, description = "a malformed Idempotency-Key"),
        (status = 409, description = "a period-close job is running on the month (cancel it instead), or the Idempotency-Key is still in progress"),
        (status = 422, description = "not a month written YYYY-MM, or the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["close"]))
)]
pub async fn reopen_period(
    tenant: Tenant<scope::Close>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    month: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    let month = checked_month(&month)?;
    let month = month.as_str();
    let response = execute(
        &state,
        &tenant.0,
        &key,
        &request,
        RequestBody::Sent(&[]),
        async |tx| match state
            .store
            .reopen_period(tx, &tenant.0, month, &tenant.actor())
            .await?
        {
            ReopenOutcome::Open => {
                Answer::json(StatusCode::OK, &period_object(month, None), Vec::new())
            }
            ReopenOutcome::Locked(period) => Err(ApiError::Conflict {
                detail: format!(
                    "month {month} is being closed by {}; cancel that job to unlock it",
                    period.job_id
                ),
                ids: None,
            }),
        },
    )
    .await?;
    Ok(response)
}
