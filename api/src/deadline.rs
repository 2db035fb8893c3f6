//! `REQUEST_TIMEOUT`: every `/v1` request is answered within it, whatever
//! it waits on. A database or a Redis that stops answering without closing
//! its connections (a partition, a full disk, a stalled host) would
//! otherwise hold the request, and the client's connection, until the peer
//! came back. Past the deadline the request's work is dropped and the
//! answer is a 503 with `Retry-After`: the client retries with its
//! `Idempotency-Key`, and a submit that did commit is answered from its
//! stored answer, so nothing is lost or done twice.

use std::time::Duration;

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::{Method, header},
    middleware::Next,
    web,
};

use crate::{error::ApiError, routes, state::AppState};

/// A body over this is a streamed upload, bounded by its own limit.
const BOUNDED_BODY: u64 = 1024 * 1024;

/// The outermost layer: past the deadline the request's future is dropped
/// and the error is answered by the server, as any handler's error is (the
/// request is gone with its future, so no response of this layer's own can
/// be made). Such answers are counted in
/// `receipt_http_request_timeouts_total`, not among the routes' requests.
pub async fn bound_requests(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let Some(limit) = limit_of(&request) else {
        return next.call(request).await;
    };
    let path = request.path().to_owned();
    match tokio::time::timeout(limit, next.call(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(
                path,
                limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                "a request was not answered within REQUEST_TIMEOUT"
            );
            ::metrics::counter!("receipt_http_request_timeouts_total").increment(1);
            Err(ApiError::Unavailable(format!(
                "no answer within {}s (REQUEST_TIMEOUT): the database or the queue is slow \
                 or unreachable; retry later with the same Idempotency-Key",
                limit.as_secs()
            ))
            .into())
        }
    }
}

/// The request's deadline, if it has one: `REQUEST_TIMEOUT` for every
/// `/v1` request, plus the longest wait for a long poll; none for a body of
/// over 1 MiB or outside `/v1`.
fn limit_of(request: &ServiceRequest) -> Option<Duration> {
    let path = request.path();
    if !path.starts_with("/v1/") {
        return None;
    }
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let chunked = request.headers().contains_key(header::TRANSFER_ENCODING);
    if chunked || length.is_some_and(|length| length > BOUNDED_BODY) {
        return None;
    }
    let timeout = request
        .app_data::<web::Data<AppState>>()
        .map(|state| state.request_timeout)?;
    // A long poll may wait as long as its route allows, on top.
    let wait = if request.method() == Method::POST && path == "/v1/work/lease" {
        routes::work::MOST_LEASE_WAIT
    } else if request.method() == Method::GET
        && path.starts_with("/v1/jobs/")
        && request.query_string().contains("wait=")
    {
        Duration::from_secs(routes::jobs::MAX_WAIT_SECS)
    } else {
        Duration::ZERO
    };
    Some(timeout + wait)
}
