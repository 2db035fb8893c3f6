//! The tenant a request acts for: its bearer key, looked up in this
//! process's copy of the valid keys ([`crate::api_keys`]), then the
//! tenant's request rate. A key of full rights opens every route but the
//! worker protocol's; a key with the `work` scope opens only those.

use std::future::{Ready, ready};

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};

use store::KeyScope;

use crate::{api_keys::KeyHolder, error::ApiError, state::AppState};

/// The tenant the request's key belongs to.
#[derive(Debug, Clone)]
pub struct Tenant(pub String);

fn bearer(request: &HttpRequest) -> Result<&str, ApiError> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::Unauthorized("send Authorization: Bearer <api key>".into()))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::Unauthorized("the Authorization header is not readable".into()))?;
    let (scheme, key) = value.split_once(' ').ok_or_else(|| {
        ApiError::Unauthorized("the Authorization header must be Bearer <api key>".into())
    })?;
    let key = key.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || key.is_empty() {
        return Err(ApiError::Unauthorized(
            "the Authorization header must be Bearer <api key>".into(),
        ));
    }
    Ok(key)
}

impl FromRequest for Tenant {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(tenant_of(request))
    }
}

fn holder_of(request: &HttpRequest) -> Result<KeyHolder, ApiError> {
    let key = bearer(request)?;
    let state = request
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Internal("no app state".into()))?;
    let holder = state
        .keys
        .holder(key)
        .ok_or_else(|| ApiError::Unauthorized("the API key is not valid".into()))?;
    state.limits.request(&holder.tenant_id)?;
    Ok(holder)
}

fn tenant_of(request: &HttpRequest) -> Result<Tenant, ApiError> {
    let holder = holder_of(request)?;
    match holder.scope {
        KeyScope::Full => Ok(Tenant(holder.tenant_id)),
        KeyScope::Work { .. } => Err(ApiError::Forbidden(
            "this key has the work scope: it may only lease and report attempts \
             (/v1/work/...); use a key of full rights"
                .into(),
        )),
    }
}

/// A worker's key: one with the `work` scope, which leases and reports
/// the attempts of its tenant's registered kinds (of `kinds` only, when
/// the key names some).
#[derive(Debug, Clone)]
pub struct WorkerKey {
    pub tenant_id: String,
    pub kinds: Option<Vec<String>>,
}

impl WorkerKey {
    /// Whether the key may take attempts of `kind`.
    pub fn may_work_on(&self, kind: &str) -> bool {
        self.kinds
            .as_ref()
            .is_none_or(|kinds| kinds.iter().any(|known| known == kind))
    }
}

impl FromRequest for WorkerKey {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(holder_of(request).and_then(|holder| {
            match holder.scope {
                KeyScope::Work { kinds } => Ok(WorkerKey {
                    tenant_id: holder.tenant_id,
                    kinds,
                }),
                KeyScope::Full => Err(ApiError::Forbidden(
                    "leasing and reporting attempts needs a key with the work scope \
                 (`api keys create --tenant T --scope work`)"
                        .into(),
                )),
            }
        }))
    }
}
