//! The middleware that makes each request a server span: `POST
//! /v1/reports/{kind}`, with the attributes of OpenTelemetry's semantic
//! conventions for HTTP servers, continuing the caller's trace when the
//! request carries a W3C `traceparent`. Without traces exported the span
//! is disabled and costs nothing.

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    middleware::Next,
};
use tracing::{Instrument, field::Empty};

use crate::metrics::method_label;

/// What scrapers and probes call every few seconds: no trace of its own,
/// unless a caller's trace asks for one.
const UNTRACED: [&str; 3] = ["/metrics", "/healthz", "/readyz"];

pub async fn trace_requests(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if !telemetry::trace::exporting() {
        return next.call(request).await;
    }
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if traceparent.is_none() && UNTRACED.contains(&request.path()) {
        return next.call(request).await;
    }
    // A method a client made up is `_OTHER`, as the conventions say.
    let method = match method_label(request.method()) {
        "other" => "_OTHER",
        method => method,
    };
    // The route's pattern, never the path: a span's name is one of the
    // few patterns this server registers (the resource map knows it before
    // the request is routed).
    let route = request.match_pattern();
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        "HTTP request",
        otel.name = name,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = Empty,
        url.path = request.path(),
        url.scheme = %request.connection_info().scheme(),
        error.type = Empty,
    );
    telemetry::trace::continue_trace(&span, traceparent.as_deref());
    let answered = next.call(request).instrument(span.clone()).await;
    let status = match &answered {
        Ok(response) => response.status(),
        Err(error) => error.as_response_error().status_code(),
    };
    // An integer, as OpenTelemetry's conventions type it: a `u16` would
    // reach the exporter as a string.
    span.record("http.response.status_code", i64::from(status.as_u16()));
    // Only a 5xx is the server's failure; a 4xx is the client's.
    if status.is_server_error() {
        span.record("otel.status_code", "error");
        span.record("error.type", status.as_str());
    }
    answered
}
