use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
};

use actix_web::{
    HttpRequest, HttpResponse,
    http::{StatusCode, header},
    web,
};
use outbound::check_url;
use serde::{Deserialize, Serialize};
use shared::model::EVENT_TYPES;
use shared::{ledger::FieldError, time::to_rfc3339};
use store::{Actor, AuditAction, AuditChange, Delivery, NewWebhook, Registration, Webhook};
use utoipa::ToSchema;

pub use shared::objects::{DeliveryObject, WebhookObject};

use super::paging::{cut, is_id, limit_and_cursor};
use crate::{
    auth::{Tenant, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, RequestBody, execute, with_secret},
    limits::Limits,
    state::AppState,
};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterWebhook {
    /// An `http` or `https` URL on a public address.
    #[schema(example = "https://example.com/hooks/receipt")]
    pub url: String,
    /// Default: all of `job.succeeded`, `job.failed`, `job.cancelled`.
    pub events: Option<Vec<String>>,
    /// Only this job's events; if it is already final, its event is sent at once.
    pub job_id: Option<String>,
}

/// A webhook as the API shows it; its secret only with `with_secret`
/// (the answers to a registration and a rotation).
pub fn webhook_object(webhook: &Webhook, with_secret: bool) -> WebhookObject {
    WebhookObject {
        id: webhook.webhook_id.clone(),
        url: webhook.url.clone(),
        events: webhook.events.clone(),
        job_id: webhook.job_id.clone(),
        enabled: webhook.enabled,
        secret: webhook.secret.clone().filter(|_| with_secret),
        created_at: to_rfc3339(webhook.created_at),
    }
}

#[derive(Serialize, ToSchema)]
pub struct WebhookPage {
    pub data: Vec<WebhookObject>,
    pub next_cursor: Option<String>,
}

/// A delivery attempt as the API shows it.
pub fn delivery_object(d: &Delivery) -> DeliveryObject {
    DeliveryObject {
        event_id: d.event_id.clone(),
        event_type: d.event_type.clone(),
        attempt: d.attempt,
        response_status: d.response_status,
        error: d.error.clone(),
        duration_ms: d.duration_ms,
        attempted_at: to_rfc3339(d.attempted_at),
        next_attempt_at: d.next_attempt_at.map(to_rfc3339),
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryObject>,
    pub next_cursor: Option<String>,
}

fn not_found(webhook_id: &str) -> ApiError {
    ApiError::NotFound(format!("there is no webhook {webhook_id}"))
}

/// Checks a registration before anything is stored (a refusal stores no
/// idempotency key either).
async fn validate(state: &AppState, request: &RegisterWebhook) -> ApiResult<Vec<String>> {
    let mut errors = Vec::new();
    if let Err(message) = check_url(&request.url, state.webhook_allow_private).await {
        errors.push(FieldError::new("url", message));
    }
    let events = match &request.events {
        None => EVENT_TYPES.iter().map(|e| (*e).to_owned()).collect(),
        Some(events) => {
            if events.is_empty() {
                errors.push(FieldError::new("events", "must name at least one event"));
            }
            for (i, event) in events.iter().enumerate() {
                if !EVENT_TYPES.contains(&event.as_str()) {
                    errors.push(FieldError::new(
                        format!("events[{i}]"),
                        "must be job.succeeded, job.failed or job.cancelled",
                    ));
                }
            }
            let unique: BTreeSet<&String> = events.iter().collect();
            EVENT_TYPES
                .iter()
                .filter(|e| unique.iter().any(|u| u.as_str() == **e))
                .map(|e| (*e).to_owned())
                .collect()
        }
    };
    if errors.is_empty() {
        Ok(events)
    } else {
        Err(ApiError::Validation {
            detail: "the webhook is not valid".into(),
            errors,
        })
    }
}

/// Register a webhook.
#[utoipa::path(
    post, path = "/v1/webhooks", tag = "webhooks", operation_id = "registerWebhook",
    request_body = RegisterWebhook,
    responses(
        (status = 201, body = WebhookObject, description = "registered; `secret` is shown only here (and to a replay with the same Idempotency-Key, as it is then)",
         headers(("Location" = String, description = "the webhook: /v1/webhooks/{id}"))),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown field, or a malformed Idempotency-Key"),
        (status = 404, description = "job_id names no job of this tenant"),
        (status = 409, description = "the Idempotency-Key is still in progress"),
        (status = 413, description = "body over 1 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "bad URL (not http(s), a host that does not resolve in time, or not a public address), or unknown events; or the Idempotency-Key was used with a different request"),
        (status = 429, description = "over the tenant's request rate, its webhooks (MAX_WEBHOOKS), or the job's (MAX_WEBHOOKS_PER_JOB)"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn register(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let registration: RegisterWebhook = json_body(&request, &body)?;
    let events = validate(&state, &registration).await?;
    let new = NewWebhook {
        tenant_id: tenant.0.clone(),
        url: registration.url.clone(),
        events,
        job_id: registration.job_id.clone(),
    };
    let made = Mutex::new(None);
    let response = execute(
        &state,
        &tenant.0,
        &key,
        &request,
        RequestBody::Sent(&body),
        async |tx| {
            if new.job_id.as_deref().is_some_and(|id| !is_id(id, "job_")) {
                return Err(ApiError::NotFound(format!(
                    "there is no job {}",
                    new.job_id.as_deref().unwrap_or_default()
                )));
            }
            let registration = state
                .store
                .register_webhook(tx, &new, state.limits.webhook_caps())
                .await?;
            if let Some(refusal) = Limits::refuse_webhook(&registration) {
                return Err(refusal);
            }
            let Registration::Registered(webhook) = registration else {
                return Err(ApiError::NotFound(format!(
                    "there is no job {}",
                    new.job_id.as_deref().unwrap_or_default()
                )));
            };
            let change = AuditChange {
                tenant_id: Some(&tenant.0),
                action: AuditAction::WebhookRegistered,
                target: Some(&webhook.webhook_id),
                details: serde_json::json!({
                    "url": webhook.url,
                    "events": webhook.events,
                    "job_id": webhook.job_id,
                }),
            };
            state.store.audit(tx, &tenant.actor(), &change).await?;
            *made.lock().unwrap_or_else(|e| e.into_inner()) = webhook.secret.clone();
            Answer::json(
                StatusCode::CREATED,
                &webhook_object(&webhook, false),
                vec![(
                    header::LOCATION.to_string(),
                    format!("/v1/webhooks/{}", webhook.webhook_id),
                )],
            )
        },
    )
    .await?;
    // A per-job webhook of a finished job has its event already.
    state.signals.events_changed();
    let made = made.into_inner().unwrap_or_else(|e| e.into_inner());
    with_secret(response, "secret", made, async |stored| {
        current_secret(&state, &tenant.0, stored).await
    })
    .await
}

/// The secret of the webhook a stored answer shows, as it is now: what a
/// replay of its registration or rotation shows, as no secret is stored
/// with an answer.
async fn current_secret(
    state: &AppState,
    tenant_id: &str,
    stored: &serde_json::Value,
) -> ApiResult<Option<String>> {
    let Some(webhook_id) = stored["id"].as_str() else {
        return Ok(None);
    };
    Ok(state.store.webhook_secret(tenant_id, webhook_id).await?)
}

/// List webhooks, newest first.
#[utoipa::path(
    get, path = "/v1/webhooks", tag = "webhooks", operation_id = "listWebhooks",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, body = WebhookPage),
        (status = 422, description = "a query parameter is not valid; `errors` names it"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn list(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    query: web::Query<HashMap<String, String>>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let (limit, cursor) = limit_and_cursor(&query, "wh_", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the query parameters are not valid".into(),
            errors,
        });
    }
    let webhooks = state
        .store
        .list_webhooks(&tenant.0, cursor.as_deref(), limit)
        .await?;
    let (webhooks, next_cursor) = cut(webhooks, limit, |w| w.webhook_id.clone());
    Ok(HttpResponse::Ok().json(WebhookPage {
        data: webhooks.iter().map(|w| webhook_object(w, false)).collect(),
        next_cursor,
    }))
}

async fn find(
    state: &AppState,
    tenant: &Tenant<scope::Read>,
    webhook_id: &str,
) -> ApiResult<Webhook> {
    if !is_id(webhook_id, "wh_") {
        return Err(not_found(webhook_id));
    }
    state
        .store
        .get_webhook(&tenant.0, webhook_id)
        .await?
        .ok_or_else(|| not_found(webhook_id))
}

/// Get a webhook (without its secret).
#[utoipa::path(
    get, path = "/v1/webhooks/{webhook_id}", tag = "webhooks", operation_id = "getWebhook",
    params(("webhook_id" = String, Path)),
    responses(
        (status = 200, body = WebhookObject),
        (status = 404, description = "no webhook of this tenant has this id"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    webhook_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let webhook = find(&state, &tenant, &webhook_id).await?;
    Ok(HttpResponse::Ok().json(webhook_object(&webhook, false)))
}

/// Delete a webhook: nothing further is sent to it.
#[utoipa::path(
    delete, path = "/v1/webhooks/{webhook_id}", tag = "webhooks", operation_id = "deleteWebhook",
    params(("webhook_id" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, description = "no webhook of this tenant has this id"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn delete(
    tenant: Tenant<scope::Manage>,
    state: web::Data<AppState>,
    webhook_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if !is_id(&webhook_id, "wh_")
        || !state
            .store
            .delete_webhook(&tenant.0, &webhook_id, &tenant.actor())
            .await?
    {
        return Err(not_found(&webhook_id));
    }
    Ok(HttpResponse::NoContent().finish())
}

/// A webhook's delivery attempts, newest first.
#[utoipa::path(
    get, path = "/v1/webhooks/{webhook_id}/deliveries", tag = "webhooks", operation_id = "listWebhookDeliveries",
    params(
        ("webhook_id" = String, Path),
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, body = DeliveryPage),
        (status = 404, description = "no webhook of this tenant has this id"),
        (status = 422, description = "a query parameter is not valid; `errors` names it"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn deliveries(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    webhook_id: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> ApiResult<HttpResponse> {
    let webhook = find(&state, &tenant, &webhook_id).await?;
    let mut errors = Vec::new();
    let (limit, cursor) = limit_and_cursor(&query, "", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the query parameters are not valid".into(),
            errors,
        });
    }
    let deliveries = state
        .store
        .list_deliveries(&webhook.webhook_id, cursor.as_deref(), limit)
        .await?;
    let (deliveries, next_cursor) = cut(deliveries, limit, |d| d.delivery_id.clone());
    Ok(HttpResponse::Ok().json(DeliveryPage {
        data: deliveries.iter().map(delivery_object).collect(),
        next_cursor,
    }))
}

/// Enable a webhook again after a receiver's 410 disabled it.
#[utoipa::path(
    post, path = "/v1/webhooks/{webhook_id}/enable", tag = "webhooks", operation_id = "enableWebhook",
    params(("webhook_id" = String, Path)),
    responses(
        (status = 200, body = WebhookObject, description = "enabled (also when it already was); events of jobs that end from now on are sent, those dropped while it was disabled are not"),
        (status = 400, description = "a malformed Idempotency-Key"),
        (status = 404, description = "no webhook of this tenant has this id"),
        (status = 409, description = "the Idempotency-Key is still in progress"),
        (status = 422, description = "the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn enable(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    webhook_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    let change = WebhookChange::Enable;
    let actor = tenant.actor();
    change_webhook(
        &state,
        &tenant.0,
        &key,
        &request,
        &webhook_id,
        change,
        &actor,
    )
    .await
}

/// Give a webhook a new secret, shown only in this answer. The old secret
/// stops signing at once, including the next attempts of pending events.
#[utoipa::path(
    post, path = "/v1/webhooks/{webhook_id}/rotate-secret", tag = "webhooks", operation_id = "rotateWebhookSecret",
    params(("webhook_id" = String, Path)),
    responses(
        (status = 200, body = WebhookObject, description = "the webhook with its new `secret`, shown only here (and to a replay with the same Idempotency-Key, as it is then)"),
        (status = 400, description = "a malformed Idempotency-Key"),
        (status = 404, description = "no webhook of this tenant has this id"),
        (status = 409, description = "the Idempotency-Key is still in progress"),
        (status = 422, description = "the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn rotate_secret(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    webhook_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    let change = WebhookChange::RotateSecret;
    let actor = tenant.actor();
    change_webhook(
        &state,
        &tenant.0,
        &key,
        &request,
        &webhook_id,
        change,
        &actor,
    )
    .await
}

/// What `POST /v1/webhooks/{id}/enable` and `.../rotate-secret` change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookChange {
    Enable,
    /// The answer shows the new secret.
    RotateSecret,
}

/// The effect and answer of `POST /v1/webhooks/{id}/enable` and
/// `.../rotate-secret`, also the dashboard's.
pub async fn change_webhook(
    state: &AppState,
    tenant_id: &str,
    key: &IdempotencyKey,
    request: &HttpRequest,
    webhook_id: &str,
    change: WebhookChange,
    actor: &Actor,
) -> ApiResult<HttpResponse> {
    if !is_id(webhook_id, "wh_") {
        return Err(not_found(webhook_id));
    }
    let made = Mutex::new(None);
    let response = execute(
        state,
        tenant_id,
        key,
        request,
        RequestBody::Sent(&[]),
        async |tx| {
            let store = &state.store;
            let webhook = match change {
                WebhookChange::Enable => store.enable_webhook(tx, tenant_id, webhook_id).await?,
                WebhookChange::RotateSecret => {
                    store
                        .rotate_webhook_secret(tx, tenant_id, webhook_id)
                        .await?
                }
            }
            .ok_or_else(|| not_found(webhook_id))?;
            let action = match change {
                WebhookChange::Enable => AuditAction::WebhookEnabled,
                WebhookChange::RotateSecret => AuditAction::WebhookSecretRotated,
            };
            let audited = AuditChange {
                tenant_id: Some(tenant_id),
                action,
                target: Some(webhook_id),
                details: serde_json::json!({}),
            };
            store.audit(tx, actor, &audited).await?;
            if change == WebhookChange::RotateSecret {
                *made.lock().unwrap_or_else(|e| e.into_inner()) = webhook.secret.clone();
            }
            Answer::json(StatusCode::OK, &webhook_object(&webhook, false), vec![])
        },
    )
    .await?;
    if change != WebhookChange::RotateSecret {
        return Ok(response);
    }
    let made = made.into_inner().unwrap_or_else(|e| e.into_inner());
    with_secret(response, "secret", made, async |stored| {
        current_secret(state, tenant_id, stored).await
    })
    .await
}
