//! The middleware that counts and times every request; the recorder
//! `/metrics` renders is `telemetry::metrics`'s.

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::Method,
    middleware::Next,
};

/// The `method` label of a request: one of the standard methods, or
/// `other`. A client chooses the method, and each label value is a series
/// kept for the life of the process, so only a bounded set may appear.
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Counts and times each request by method, route pattern and status.
pub async fn count_requests(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = method_label(request.method());
    let response = next.call(request).await?;
    // The route's pattern, never the path: paths are the client's to make
    // up, patterns are the few this server registers.
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = response.status().as_u16().to_string();
    ::metrics::counter!("receipt_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    ::metrics::histogram!("receipt_http_request_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    Ok(response)
}
