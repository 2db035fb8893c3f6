//! Each request's id: made here for every request, answered in
//! `X-Request-Id`, and written into the audit log's entry of any change
//! the request makes, so an entry leads to the request's logs and trace.

use actix_web::{
    HttpMessage,
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::header::{HeaderName, HeaderValue},
    middleware::Next,
};
use shared::ids::new_id;

/// The header that carries the id back.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `req_` and a UUIDv7, as the request's extensions hold it.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The id [`assign`] gave the request (empty outside the middleware).
pub fn of(request: &actix_web::HttpRequest) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.0.clone())
        .unwrap_or_default()
}

pub async fn assign(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = new_id("req_");
    request.extensions_mut().insert(RequestId(id.clone()));
    let mut response = next.call(request).await?;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    Ok(response)
}
