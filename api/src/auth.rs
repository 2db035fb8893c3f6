//! Bearer API keys. Keys are stored hashed; this process keeps the hashes
//! it has seen in memory so most requests cost no database round trip.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, RwLock},
};

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};
use shared::store::{Store, hash_key};

use crate::{error::ApiError, state::AppState};

/// The tenant the request's key belongs to.
#[derive(Debug, Clone)]
pub struct Tenant(pub String);

#[derive(Clone, Default)]
pub struct KeyCache {
    tenants_by_hash: Arc<RwLock<HashMap<String, String>>>,
}

impl KeyCache {
    async fn tenant(&self, store: &Store, key: &str) -> Result<Option<String>, ApiError> {
        let hash = hash_key(key);
        if let Some(tenant) = self
            .tenants_by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash)
        {
            return Ok(Some(tenant.clone()));
        }
        let tenant = store.tenant_of_key_hash(&hash).await?;
        if let Some(tenant) = &tenant {
            self.tenants_by_hash
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(hash, tenant.clone());
        }
        Ok(tenant)
    }
}

fn bearer(request: &HttpRequest) -> Result<String, ApiError> {
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
    Ok(key.to_owned())
}

impl FromRequest for Tenant {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let key = bearer(request);
        let state = request.app_data::<web::Data<AppState>>().cloned();
        Box::pin(async move {
            let key = key?;
            let state = state.ok_or_else(|| ApiError::Internal("no app state".into()))?;
            match state.keys.tenant(&state.store, &key).await? {
                Some(tenant) => {
                    state.limits.request(&tenant)?;
                    Ok(Tenant(tenant))
                }
                None => Err(ApiError::Unauthorized("the API key is not valid".into())),
            }
        })
    }
}
