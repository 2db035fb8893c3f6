//! HTTP servers a test runs inside itself on 127.0.0.1 (webhook and filing
//! receivers): a free port each, stopped with their handle.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// An HTTP server on 127.0.0.1 (a free port) that answers every request
/// with `handler`, sharing `data` with it. Stop it with the handle.
pub fn serve_on_loopback<T, F, Args>(
    data: actix_web::web::Data<T>,
    handler: F,
) -> (std::net::SocketAddr, actix_web::dev::ServerHandle)
where
    T: ?Sized + Send + Sync + 'static,
    F: actix_web::Handler<Args> + Clone + Send + 'static,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    use actix_web::{App, HttpServer, web};
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(handler.clone()))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .expect("bind the receiver");
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    (addr, handle)
}

/// A request's headers, as a client library's type (for the
/// `standardwebhooks` crate, which checks signatures over them).
pub fn headers_of(request: &actix_web::HttpRequest) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in request.headers() {
        headers.append(
            HeaderName::from_bytes(name.as_str().as_bytes()).expect("a header name"),
            HeaderValue::from_bytes(value.as_bytes()).expect("a header value"),
        );
    }
    headers
}
