//! Report kinds: the built-in ones and those the tenant registers
//! (`/v1/kinds`, `docs/api.md`, Kinds).

use actix_web::{HttpRequest, HttpResponse, http::header, web};
use shared::work::{DeletedKind, KindDeclaration, KindList, KindObject};
use shared::{model::Priority, time::to_rfc3339};
use store::{PutKind, RegisteredKind};

use crate::{
    auth::{Tenant, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    state::AppState,
};

pub fn kind_object(kind: &RegisteredKind) -> KindObject {
    KindObject {
        name: kind.name.clone(),
        builtin: false,
        about: kind.about.clone(),
        params_schema: serde_json::from_str(&kind.params_schema).ok(),
        timeout_secs: u64::try_from(kind.timeout_ms / 1000).unwrap_or(0),
        max_attempts: kind.max_attempts,
        result_media_types: Some(kind.result_media_types.clone()),
        max_running: kind.max_running,
        priority: kind.priority,
        created_at: Some(to_rfc3339(kind.created_at)),
        updated_at: Some(to_rfc3339(kind.updated_at)),
    }
}

/// A built-in kind as `/v1/kinds` shows it.
fn builtin_object(kind: &dyn reports::AnyReportKind) -> KindObject {
    KindObject {
        name: kind.name().to_owned(),
        builtin: true,
        about: kind.about().to_owned(),
        params_schema: None,
        timeout_secs: kind.timeout().as_secs(),
        max_attempts: kind.max_attempts(),
        result_media_types: None,
        max_running: None,
        priority: Priority::Normal,
        created_at: None,
        updated_at: None,
    }
}

/// The tenant's registered kind of this name, unless deleted.
pub async fn live_kind(
    state: &AppState,
    tenant_id: &str,
    name: &str,
) -> ApiResult<Option<RegisteredKind>> {
    Ok(state
        .store
        .registered_kind(tenant_id, name)
        .await?
        .filter(|kind| kind.deleted_at.is_none()))
}

/// Every kind the tenant may submit: the built-in ones this service runs,
/// then the tenant's registered ones, each by name.
#[utoipa::path(
    get, path = "/v1/kinds", tag = "kinds", operation_id = "listKinds",
    responses((status = 200, body = KindList)),
    security(("bearer" = ["read"]))
)]
pub async fn list(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let kinds = kind_list(&state, &tenant.0).await?;
    Ok(HttpResponse::Ok().json(KindList { kinds }))
}

/// The kinds `GET /v1/kinds` lists, as the dashboard shows them too.
pub async fn kind_list(state: &AppState, tenant_id: &str) -> ApiResult<Vec<KindObject>> {
    let mut kinds: Vec<KindObject> = state.registry.kinds().map(builtin_object).collect();
    kinds.extend(
        state
            .store
            .registered_kinds(tenant_id)
            .await?
            .iter()
            .filter(|kind| kind.deleted_at.is_none())
            .map(kind_object),
    );
    Ok(kinds)
}

/// One kind the tenant may submit: built in, or registered.
#[utoipa::path(
    get, path = "/v1/kinds/{name}", tag = "kinds", operation_id = "getKind",
    params(("name" = String, Path)),
    responses(
        (status = 200, body = KindObject),
        (status = 404, description = "no kind of this name"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if let Some(kind) = state.registry.get(&name) {
        return Ok(HttpResponse::Ok().json(builtin_object(kind)));
    }
    let kind = live_kind(&state, &tenant.0, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("there is no kind {name:?}")))?;
    Ok(HttpResponse::Ok().json(kind_object(&kind)))
}

/// Register a kind, or change one; the same declaration again changes
/// nothing. Its jobs are run by the tenant's workers over HTTP
/// (`/v1/work/...`).
#[utoipa::path(
    put, path = "/v1/kinds/{name}", tag = "kinds", operation_id = "putKind",
    params(("name" = String, Path, description = "1 to 64 lowercase letters, digits, '-', '_' or '.', starting with a letter; not a built-in kind's name")),
    request_body = KindDeclaration,
    responses(
        (status = 201, body = KindObject, description = "registered (or registered again after a delete)",
         headers(("Location" = String, description = "/v1/kinds/{name}"))),
        (status = 200, body = KindObject, description = "changed, or the same declaration again"),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown or missing field"),
        (status = 413, description = "body over 64 KiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "a bad name (or a built-in kind's), a schema that is not Draft 2020-12 or refers outside itself, or values out of range; `errors` names each"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn put(
    tenant: Tenant<scope::Manage>,
    state: web::Data<AppState>,
    name: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let declaration: KindDeclaration = json_body(&request, &body)?;
    let kind = reports::registered::kind_of(&declaration, &tenant.0, &name).map_err(|errors| {
        ApiError::Validation {
            detail: format!("the declaration of kind {:?} is not valid", name.as_str()),
            errors,
        }
    })?;
    Ok(match state.store.put_kind(&kind, &tenant.actor()).await? {
        PutKind::Created(kind) => HttpResponse::Created()
            .insert_header((header::LOCATION, format!("/v1/kinds/{}", kind.name)))
            .json(kind_object(&kind)),
        PutKind::Updated(kind) | PutKind::Unchanged(kind) => {
            HttpResponse::Ok().json(kind_object(&kind))
        }
    })
}

/// Delete a registered kind: submits of it are refused from now on; its
/// jobs already queued or running are not touched, and workers that name
/// the kind keep leasing them until none is left.
#[utoipa::path(
    delete, path = "/v1/kinds/{name}", tag = "kinds", operation_id = "deleteKind",
    params(("name" = String, Path)),
    responses(
        (status = 200, body = DeletedKind),
        (status = 404, description = "no registered kind of this name"),
        (status = 409, description = "a built-in kind, which cannot be deleted"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn delete(
    tenant: Tenant<scope::Manage>,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if reports::Registry::all().get(&name).is_some() {
        return Err(ApiError::Conflict {
            detail: format!(
                "{:?} is a built-in kind; it cannot be deleted",
                name.as_str()
            ),
            ids: None,
        });
    }
    let active_jobs = state
        .store
        .delete_kind(&tenant.0, &name, &tenant.actor())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("there is no registered kind {name:?}")))?;
    Ok(HttpResponse::Ok().json(DeletedKind {
        name: name.into_inner(),
        active_jobs,
    }))
}
