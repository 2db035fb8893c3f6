//! The tenant a request acts for: its bearer key, looked up in this
//! process's copy of the valid keys ([`crate::api_keys`]), then the
//! tenant's request rate, then the key's scopes. Each handler names the
//! scope its route needs in its signature (`Tenant<scope::Manage>`), so a
//! route cannot be served without one; a key without it gets a 403 that
//! names the scope (`docs/api-keys.md`, Scopes).

use std::{
    future::{Ready, ready},
    marker::PhantomData,
};

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};

use store::{Actor, KeyScope, Scope};

use crate::{api_keys::KeyHolder, error::ApiError, request_id, state::AppState};

/// The scopes a handler can ask for, as types.
pub mod scope {
    use store::Scope;

    /// A scope a route needs.
    pub trait Needed {
        const SCOPE: Scope;
    }

    macro_rules! scopes {
        ($($name:ident),*) => {$(
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl Needed for $name {
                const SCOPE: Scope = Scope::$name;
            }
        )*};
    }

    scopes!(Read, Submit, Manage, Close, Admin, Work);
}

/// A valid key of the request, whatever its scopes: for a route whose
/// scope depends on what it touches (a `period-close` needs `close`, other
/// reports `submit`).
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant_id: String,
    pub key_id: String,
    pub scope: KeyScope,
    pub request_id: String,
}

impl Caller {
    /// Refuses the request unless the key holds `needed`.
    pub fn require(&self, needed: Scope) -> Result<(), ApiError> {
        if self.scope.allows(needed) {
            return Ok(());
        }
        Err(ApiError::MissingScope {
            needed,
            held: self.scope.describe(),
        })
    }

    /// Who the audit log says made a change.
    pub fn actor(&self) -> Actor {
        Actor::Key {
            key_id: self.key_id.clone(),
            request_id: self.request_id.clone(),
        }
    }
}

/// The tenant of a key that holds the scope `S`.
#[derive(Debug, Clone)]
pub struct Tenant<S>(pub String, Caller, PhantomData<S>);

impl<S> Tenant<S> {
    /// Who the audit log says made a change.
    pub fn actor(&self) -> Actor {
        self.1.actor()
    }

    /// The key's own rights.
    pub fn caller(&self) -> &Caller {
        &self.1
    }
}

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

fn caller_of(request: &HttpRequest) -> Result<Caller, ApiError> {
    let holder = holder_of(request)?;
    let request_id = request_id::of(request);
    Ok(Caller {
        tenant_id: holder.tenant_id,
        key_id: holder.key_id,
        scope: holder.scope,
        request_id,
    })
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(request))
    }
}

impl<S: scope::Needed> FromRequest for Tenant<S> {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(request).and_then(|caller| {
            caller.require(S::SCOPE)?;
            Ok(Tenant(caller.tenant_id.clone(), caller, PhantomData))
        }))
    }
}

/// A worker's key: one with the `work` scope, which leases and reports
/// the attempts of its tenant's registered kinds (of some kinds only,
/// when the key names them).
#[derive(Debug, Clone)]
pub struct WorkerKey {
    pub tenant_id: String,
    scope: KeyScope,
}

impl WorkerKey {
    /// Whether the key may take attempts of `kind`.
    pub fn may_work_on(&self, kind: &str) -> bool {
        self.scope.may_work_on(kind)
    }

    /// The kinds the key is narrowed to, if any.
    pub fn kinds(&self) -> Option<&[String]> {
        self.scope.kinds()
    }
}

impl FromRequest for WorkerKey {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(request).and_then(|caller| {
            caller.require(Scope::Work)?;
            Ok(WorkerKey {
                tenant_id: caller.tenant_id,
                scope: caller.scope,
            })
        }))
    }
}
