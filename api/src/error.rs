//! The API's one error type, and the one place errors become
//! `application/problem+json` (RFC 9457). A safety net turns any other
//! error response (actix's own: unknown route, body too large, ...) into
//! problem+json too, so a client never sees anything else.

use actix_web::{
    HttpResponse, ResponseError,
    body::BoxBody,
    dev::ServiceResponse,
    http::{
        StatusCode,
        header::{self, HeaderValue},
    },
    middleware::ErrorHandlerResponse,
};
use shared::ledger::FieldError;
pub use shared::objects::Problem;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// What stops the api process or one of its commands (`main.rs`) before
/// or after serving: told to the operator, never to a client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: malformed JSON, a wrong JSON type, an unknown field, a bad header.
    #[error("{0}")]
    BadRequest(String),
    /// 401, with `WWW-Authenticate: Bearer`.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: the key is valid but its scope does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// 403: the key lacks the scope the route needs; the problem names it
    /// (`required_scope`).
    #[error("this needs a key with the `{}` scope; this key has {}", needed.name(), if held.is_empty() { "no scope" } else { held })]
    MissingScope {
        needed: store::Scope,
        /// The key's scopes, as `api keys list` shows them.
        held: String,
    },
    /// 404: unknown job or kind, or another tenant's resource.
    #[error("{0}")]
    NotFound(String),
    /// 409: the action does not fit the resource's state; `ids` names the
    /// conflicting ledger entries of an import.
    #[error("{detail}")]
    Conflict {
        detail: String,
        ids: Option<Vec<String>>,
    },
    /// 409: a call on an attempt that its fence refused, changing nothing;
    /// the problem's type names why (`/problems/attempt-superseded`,
    /// `/problems/job-cancelled`, `/problems/attempt-ended`,
    /// `/problems/attempt-timed-out`).
    #[error("{detail}")]
    Fenced {
        reason: &'static str,
        detail: String,
    },
    /// 409, with `Retry-After: 1`: the first request under this
    /// `Idempotency-Key` is still being processed. Unlike a conflict with
    /// the resource's state, sending the same request again will succeed,
    /// and the header is how a client tells the two apart.
    #[error("{0}")]
    InProgress(String),
    /// 413: a body over its route's limit, found while it streams in.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: the body is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: well-formed but invalid; `errors` says which fields and why.
    #[error("{detail}")]
    Validation {
        detail: String,
        errors: Vec<FieldError>,
    },
    /// 429, with `Retry-After` (whole seconds, at least 1): the tenant is
    /// over one of its limits.
    #[error("{detail}")]
    TooManyRequests {
        detail: String,
        retry_after_secs: u64,
    },
    /// 503, with `Retry-After`: the database or the queue is down.
    #[error("{0}")]
    Unavailable(String),
    /// 500: a bug. The cause is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn validation(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::Validation {
            detail: format!("{field} {message}"),
            errors: vec![FieldError::new(field, message)],
        }
    }

    fn slug(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "malformed-request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::MissingScope { .. } => "forbidden",
            ApiError::NotFound(_) => "not-found",
            ApiError::Conflict { .. } | ApiError::InProgress(_) => "conflict",
            ApiError::Fenced { reason, .. } => reason,
            ApiError::PayloadTooLarge(_) => "payload-too-large",
            ApiError::UnsupportedMediaType(_) => "unsupported-media-type",
            ApiError::Validation { .. } => "validation-error",
            ApiError::TooManyRequests { .. } => "too-many-requests",
            ApiError::Unavailable(_) => "service-unavailable",
            ApiError::Internal(_) => "internal-error",
        }
    }
}

impl From<store::Error> for ApiError {
    fn from(error: store::Error) -> Self {
        if error.is_unavailable() {
            tracing::warn!(%error, "dependency unavailable");
            ApiError::Unavailable("the database is unavailable; retry later".into())
        } else {
            ApiError::Internal(error.to_string())
        }
    }
}

/// The problem document of an error answer with this status.
fn problem(status: StatusCode, slug: &str, detail: impl Into<String>) -> Problem {
    Problem {
        problem_type: format!("/problems/{slug}"),
        title: status.canonical_reason().unwrap_or("Error").to_owned(),
        status: status.as_u16(),
        detail: detail.into(),
        errors: None,
        ids: None,
        required_scope: None,
    }
}

fn to_bytes(problem: &Problem) -> Vec<u8> {
    // A struct of strings, numbers and lists always serializes.
    serde_json::to_vec(problem).unwrap_or_default()
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::MissingScope { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } | ApiError::InProgress(_) | ApiError::Fenced { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Validation { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let (status, headers, body) = self.parts();
        let mut response = HttpResponse::build(status);
        for header in headers {
            response.insert_header(header);
        }
        response.body(body)
    }
}

impl ApiError {
    /// The problem document of this error (an internal error's cause is
    /// logged, never told).
    pub fn problem(&self) -> Problem {
        let status = self.status_code();
        let detail = match self {
            ApiError::Internal(cause) => {
                tracing::error!(cause, "internal error");
                "an unexpected error occurred; it has been logged".to_owned()
            }
            other => other.to_string(),
        };
        let mut problem = problem(status, self.slug(), detail);
        match self {
            ApiError::Validation { errors, .. } => problem.errors = Some(errors.clone()),
            ApiError::Conflict { ids, .. } => problem.ids.clone_from(ids),
            ApiError::MissingScope { needed, .. } => {
                problem.required_scope = Some(needed.name().to_owned());
            }
            _ => {}
        }
        problem
    }

    /// The status, headers and problem body of this error: the one place
    /// an error's answer is made (also stored against idempotency keys).
    pub fn parts(&self) -> (StatusCode, Vec<(String, String)>, Vec<u8>) {
        let status = self.status_code();
        let problem = self.problem();
        let mut headers = vec![(header::CONTENT_TYPE.to_string(), PROBLEM_JSON.to_owned())];
        match self {
            ApiError::Unauthorized(_) => {
                headers.push((header::WWW_AUTHENTICATE.to_string(), "Bearer".to_owned()));
            }
            ApiError::Unavailable(_) => {
                headers.push((header::RETRY_AFTER.to_string(), "5".to_owned()));
            }
            ApiError::InProgress(_) => {
                headers.push((header::RETRY_AFTER.to_string(), "1".to_owned()));
            }
            ApiError::TooManyRequests {
                retry_after_secs, ..
            } => {
                let secs = (*retry_after_secs).max(1);
                headers.push((header::RETRY_AFTER.to_string(), secs.to_string()));
            }
            _ => {}
        }
        (status, headers, to_bytes(&problem))
    }
}

/// The safety net: any error response that is not already problem+json
/// (actix's own errors) gets a problem body with the same status.
pub fn problem_fallback<B>(
    response: ServiceResponse<B>,
) -> actix_web::Result<ErrorHandlerResponse<B>> {
    // The dashboard's pages (HTML) say what went wrong in their own way.
    let is_answer = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(PROBLEM_JSON.as_bytes())
                || v.as_bytes().starts_with(b"text/html")
        });
    if is_answer {
        return Ok(ErrorHandlerResponse::Response(
            response.map_into_left_body(),
        ));
    }
    let status = response.status();
    let path = response.request().path().to_owned();
    let detail = match status {
        StatusCode::NOT_FOUND => format!("no route matches {path}"),
        StatusCode::METHOD_NOT_ALLOWED => format!("{path} does not take this method"),
        StatusCode::PAYLOAD_TOO_LARGE => {
            "the request body is larger than this route accepts".to_owned()
        }
        StatusCode::BAD_REQUEST => "the request could not be read".to_owned(),
        _ => status
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    };
    let slug = match status {
        StatusCode::NOT_FOUND => "not-found",
        StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload-too-large",
        StatusCode::BAD_REQUEST => "malformed-request",
        s if s.is_server_error() => "internal-error",
        _ => "http-error",
    };
    let body = to_bytes(&problem(status, slug, detail));
    let (request, mut response) = response.into_parts();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    headers.remove(header::CONTENT_LENGTH);
    let response = response.set_body(BoxBody::new(body));
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(request, response).map_into_right_body(),
    ))
}
