//! The tenant a request acts for: its bearer key, looked up in this
//! process's copy of the valid keys ([`crate::api_keys`]), then the
//! tenant's request rate.

use std::future::{Ready, ready};

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};

use crate::{error::ApiError, state::AppState};

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

fn tenant_of(request: &HttpRequest) -> Result<Tenant, ApiError> {
    let key = bearer(request)?;
    let state = request
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Internal("no app state".into()))?;
    let tenant = state
        .keys
        .tenant(key)
        .ok_or_else(|| ApiError::Unauthorized("the API key is not valid".into()))?;
    state.limits.request(&tenant)?;
    Ok(Tenant(tenant))
}
