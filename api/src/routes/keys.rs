//! The tenant's API keys (scope `admin`), the calling key itself (any
//! key), and the audit log of changes to the tenant's setup (scope
//! `admin`).

use std::{collections::HashMap, sync::Mutex};

use actix_web::{
    HttpRequest, HttpResponse,
    http::{StatusCode, header},
    web,
};
use serde::{Deserialize, Serialize};
use shared::{
    ledger::FieldError,
    time::{parse_rfc3339, to_rfc3339},
};
use store::{ApiKeyRecord, AuditAction, AuditEntry, AuditFilter, KeyScope, RevokeOutcome, Scope};
use utoipa::ToSchema;

use super::paging::{cut, limit_and_cursor};
use crate::{
    auth::{Caller, Tenant, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, REPLAYED_HEADER, RequestBody, execute},
    state::AppState,
};

/// A key as the API shows it: never the key itself (but once, as it is
/// made), nor its hash.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyObject {
    /// `key_` and 16 hex digits.
    #[schema(example = "key_0123456789abcdef")]
    pub id: String,
    pub tenant: String,
    /// The key's scopes. A key of full rights (made without scopes) has
    /// every scope but `work`.
    #[schema(example = json!(["read", "submit"]))]
    pub scopes: Vec<String>,
    /// Made without scopes: every scope but `work`, and any scope a later
    /// release adds.
    pub full: bool,
    /// With `work`: the registered kinds the key may take; absent for all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    /// What the key begins with, to recognise it (`rk_1a2b`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// The key itself: only in the answer that made it. A replay of that
    /// request (same Idempotency-Key) answers without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub data: Vec<KeyObject>,
}

/// A new key of the caller's tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// One or more of `read`, `submit`, `manage`, `close`, `admin`,
    /// `work`. Absent: full rights (every scope but `work`).
    pub scopes: Option<Vec<String>>,
    /// With `work`: the registered kinds the key may take.
    pub kinds: Option<Vec<String>>,
}

fn key_object(
    id: String,
    tenant: String,
    scope: &KeyScope,
    prefix: Option<String>,
    created_at: i64,
) -> KeyObject {
    KeyObject {
        id,
        tenant,
        scopes: scope
            .scopes()
            .into_iter()
            .map(|s| s.name().to_owned())
            .collect(),
        full: scope.is_full(),
        kinds: scope.kinds().map(<[String]>::to_vec),
        prefix,
        created_at: to_rfc3339(created_at),
        last_used_at: None,
        revoked_at: None,
        key: None,
    }
}

pub fn record_object(record: &ApiKeyRecord) -> KeyObject {
    // A scope this build does not know opens nothing: shown as none.
    let none = KeyScope::of(&[], None);
    let scope = record.scope.as_ref().unwrap_or(&none);
    KeyObject {
        last_used_at: record.last_used_at.map(to_rfc3339),
        revoked_at: record.revoked.map(|(at, _)| to_rfc3339(at)),
        ..key_object(
            record.key_id.clone(),
            record.tenant_id.clone(),
            scope,
            record.key_prefix.clone(),
            record.created_at,
        )
    }
}

/// The key the request was made with: its id, tenant and scopes.
#[utoipa::path(
    get, path = "/v1/key", tag = "keys", operation_id = "getCallingKey",
    responses((status = 200, body = KeyObject)),
    security(("bearer" = []))
)]
pub async fn current(caller: Caller, state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let keys = state.store.tenant_api_keys(&caller.tenant_id).await?;
    let object = match keys.iter().find(|key| key.key_id == caller.key_id) {
        Some(record) => record_object(record),
        None => key_object(
            caller.key_id.clone(),
            caller.tenant_id.clone(),
            &caller.scope,
            None,
            0,
        ),
    };
    Ok(HttpResponse::Ok().json(object))
}

/// The tenant's keys, revoked ones included, oldest first.
#[utoipa::path(
    get, path = "/v1/keys", tag = "keys", operation_id = "listKeys",
    responses((status = 200, body = KeyList)),
    security(("bearer" = ["admin"]))
)]
pub async fn list(
    tenant: Tenant<scope::Admin>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let keys = state.store.tenant_api_keys(&tenant.0).await?;
    Ok(HttpResponse::Ok().json(KeyList {
        data: keys.iter().map(record_object).collect(),
    }))
}

/// Make a key for the tenant, of some scopes. The key is in this answer
/// only.
#[utoipa::path(
    post, path = "/v1/keys", tag = "keys", operation_id = "createKey",
    request_body = CreateKey,
    responses(
        (status = 201, body = KeyObject, description = "made; `key` is shown only here (a replay answers without it)",
         headers(("Location" = String, description = "/v1/keys/{id}"))),
        (status = 400, description = "malformed JSON, a wrong JSON type or an unknown field"),
        (status = 409, description = "a key of full rights (no `scopes`) while the deployment's keys of full rights are the list in API_KEYS; or the Idempotency-Key is still in progress"),
        (status = 413, description = "body over 1 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "an unknown scope, an empty list, kinds without `work`, or a bad kind name; or the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["admin"]))
)]
pub async fn create(
    tenant: Tenant<scope::Admin>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let create: CreateKey = json_body(&request, &body)?;
    let scope = checked_scope(create)?;
    if state.keys_configured && scope.is_full() {
        return Err(ApiError::Conflict {
            detail: "this deployment's keys of full rights are the list in API_KEYS, and an api \
                     start would revoke one made here; give the key scopes, or add it to API_KEYS"
                .into(),
            ids: None,
        });
    }
    // The key is shown once: the stored answer, which a replay sends,
    // never holds it (nothing stores a key but its hash).
    let made = Mutex::new(None);
    let actor = tenant.actor();
    let response = execute(
        &state,
        &tenant.0,
        &key,
        &request,
        RequestBody::Sent(&body),
        async |tx| {
            let new = state
                .store
                .add_api_key(tx, &tenant.0, &scope, &actor)
                .await?;
            let object = key_object(
                new.key_id.clone(),
                tenant.0.clone(),
                &scope,
                Some(new.key_prefix.clone()),
                new.created_at,
            );
            let answer = Answer::json(
                StatusCode::CREATED,
                &object,
                vec![(
                    header::LOCATION.to_string(),
                    format!("/v1/keys/{}", new.key_id),
                )],
            )?;
            *made.lock().unwrap_or_else(|e| e.into_inner()) = Some((object, new.key));
            Ok(answer)
        },
    )
    .await?;
    let replayed = response.headers().contains_key(REPLAYED_HEADER);
    match made.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((object, secret)) if !replayed => {
            let location = format!("/v1/keys/{}", object.id);
            Ok(HttpResponse::Created()
                .insert_header((header::LOCATION, location))
                .json(KeyObject {
                    key: Some(secret),
                    ..object
                }))
        }
        _ => Ok(response),
    }
}

fn checked_scope(create: CreateKey) -> ApiResult<KeyScope> {
    let Some(names) = create.scopes else {
        if create.kinds.is_some() {
            return Err(ApiError::validation(
                "kinds",
                "narrows the work scope: give scopes with work among them",
            ));
        }
        return Ok(KeyScope::full());
    };
    let mut errors = Vec::new();
    if names.is_empty() {
        errors.push(FieldError::new("scopes", "must name at least one scope"));
    }
    let mut scopes = Vec::new();
    for (n, name) in names.iter().enumerate() {
        match Scope::parse(name) {
            Some(scope) => scopes.push(scope),
            None => errors.push(FieldError::new(
                format!("scopes[{n}]"),
                format!(
                    "is not a scope; the scopes are {}",
                    Scope::ALL.map(Scope::name).join(", ")
                ),
            )),
        }
    }
    if let Some(kinds) = &create.kinds {
        if !scopes.contains(&Scope::Work) {
            errors.push(FieldError::new(
                "kinds",
                "narrows the work scope: add work to scopes",
            ));
        }
        if kinds.is_empty() {
            errors.push(FieldError::new("kinds", "must name at least one kind"));
        }
        for (n, kind) in kinds.iter().enumerate() {
            if let Err(error) = reports::registered::check_name(kind) {
                errors.push(FieldError::new(format!("kinds[{n}]"), error.message));
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the key's scopes are not valid".into(),
            errors,
        });
    }
    Ok(KeyScope::of(&scopes, create.kinds))
}

/// `key_` and 16 hex digits.
fn is_key_id(text: &str) -> bool {
    text.len() == 20 && text.starts_with("key_") && text[4..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Revoke a key of the tenant: every api process refuses it within 2
/// seconds, and its dashboard sessions end. Revoking a revoked key
/// changes nothing.
#[utoipa::path(
    delete, path = "/v1/keys/{key_id}", tag = "keys", operation_id = "revokeKey",
    params(("key_id" = String, Path)),
    responses(
        (status = 204, description = "revoked (or it already was)"),
        (status = 404, description = "no key of this tenant has this id"),
    ),
    security(("bearer" = ["admin"]))
)]
pub async fn revoke(
    tenant: Tenant<scope::Admin>,
    state: web::Data<AppState>,
    key_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let not_found = || ApiError::NotFound(format!("there is no key {key_id}"));
    if !is_key_id(&key_id) {
        return Err(not_found());
    }
    match state
        .store
        .revoke_api_key(Some(&tenant.0), &key_id, &tenant.actor())
        .await?
    {
        RevokeOutcome::Revoked { .. } | RevokeOutcome::AlreadyRevoked { .. } => {
            Ok(HttpResponse::NoContent().finish())
        }
        RevokeOutcome::UnknownKeyId => Err(not_found()),
    }
}

/// An entry of the audit log.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntryObject {
    /// `aud_` and 32 hex digits; sorts by time.
    pub id: String,
    pub at: String,
    /// One of the actions listed in `docs/api.md` (Audit log), such as
    /// `webhook.secret_rotated`.
    #[schema(example = "period.reopened")]
    pub action: String,
    /// Who: `key` (`key_id` and `request_id` say which), `job` (`job_id`:
    /// a period-close closing its month) or `command` (an operator's
    /// command on the server; `request_id` holds its words).
    pub actor: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The id of what changed: a key, webhook or schedule id, a month, a
    /// kind's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A change to the whole deployment (`secrets.rotated`), which every
    /// tenant's log shows.
    pub deployment_wide: bool,
    /// What else there is to know of the change; never a secret.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub data: Vec<AuditEntryObject>,
    /// The next page's `cursor`; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

pub fn audit_object(entry: AuditEntry) -> AuditEntryObject {
    AuditEntryObject {
        id: entry.entry_id,
        at: to_rfc3339(entry.at),
        action: entry.action,
        actor: entry.actor,
        key_id: entry.key_id,
        job_id: entry.job_id,
        request_id: entry.request_id,
        target: entry.target,
        deployment_wide: entry.tenant_id.is_none(),
        details: entry.details,
    }
}

/// Reads `action`, `since`, `until`, `limit` and `cursor`.
pub fn audit_filter(query: &HashMap<String, String>) -> ApiResult<AuditFilter> {
    let mut errors = Vec::new();
    let (limit, cursor) = limit_and_cursor(query, "aud_", &mut errors);
    let action = query
        .get("action")
        .filter(|a| !a.is_empty())
        .and_then(|name| {
            let action = AuditAction::parse(name);
            if action.is_none() {
                errors.push(FieldError::new(
                    "action",
                    format!(
                        "is not an action; the actions are {}",
                        AuditAction::ALL.map(AuditAction::name).join(", ")
                    ),
                ));
            }
            action
        });
    let mut time = |name: &str| {
        let text = query.get(name).filter(|t| !t.is_empty())?;
        let at = parse_rfc3339(text);
        if at.is_none() {
            errors.push(FieldError::new(
                name,
                "must be an RFC 3339 time with an offset (2026-12-06T09:00:00Z)",
            ));
        }
        at
    };
    let since = time("since");
    let until = time("until");
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the query parameters are not valid".into(),
            errors,
        });
    }
    Ok(AuditFilter {
        action,
        since,
        until,
        before: cursor,
        limit,
    })
}

/// The audit log of the tenant's setup, newest first: every change that
/// is not a job, with who made it, when, and the request's id.
#[utoipa::path(
    get, path = "/v1/audit", tag = "keys", operation_id = "listAuditEntries",
    params(
        ("action" = Option<String>, Query, description = "only entries of this action (`key.created`, ...)"),
        ("since" = Option<String>, Query, description = "RFC 3339: entries at or after this time"),
        ("until" = Option<String>, Query, description = "RFC 3339: entries before this time"),
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, body = AuditPage),
        (status = 422, description = "a query parameter is not valid; `errors` names it"),
    ),
    security(("bearer" = ["admin"]))
)]
pub async fn audit(
    tenant: Tenant<scope::Admin>,
    state: web::Data<AppState>,
    query: web::Query<HashMap<String, String>>,
) -> ApiResult<HttpResponse> {
    let filter = audit_filter(&query)?;
    let entries = state.store.list_audit(&tenant.0, &filter).await?;
    let (entries, next_cursor) = cut(entries, filter.limit, |e| e.entry_id.clone());
    Ok(HttpResponse::Ok().json(AuditPage {
        data: entries.into_iter().map(audit_object).collect(),
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use store::Revocation;

    use super::{super::paging::is_id, *};

    #[test]
    fn a_key_id_has_its_shape() {
        assert!(is_key_id("key_0123456789abcdef"));
        assert!(!is_key_id("key_0123456789abcde"));
        assert!(!is_key_id("kex_0123456789abcdef"));
        assert!(!is_id("key_0123456789abcdef", "key_"));
    }

    #[test]
    fn revocations_are_shown_whatever_their_reason() {
        let record = ApiKeyRecord {
            key_id: "key_0123456789abcdef".into(),
            tenant_id: "acme".into(),
            key_prefix: Some("rk_1a2b".into()),
            created_at: 0,
            last_used_at: None,
            revoked: Some((1_000, Revocation::NotInApiKeys)),
            scope: Some(KeyScope::full()),
        };
        let object = record_object(&record);
        assert!(object.revoked_at.is_some() && object.full && object.key.is_none());
        assert_eq!(
            object.scopes,
            ["read", "submit", "manage", "close", "admin"]
        );
    }
}
