//! Outbound HTTP: the Standard Webhooks signature, the guard against URLs
//! that point into our own network (SSRF), checked at registration and
//! again at delivery, and the one signed POST that webhook deliveries and
//! the filing step send, each a client span that sends its `traceparent`.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, OnceLock},
    time::Duration,
};

use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use hmac::{Hmac, Mac};
use opentelemetry::global;
use sha2::Sha256;
use tracing::{Instrument, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The Standard Webhooks signature header value:
/// `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), where the
/// key is the base64 part of the `whsec_` secret.
pub fn sign(secret: &str, event_id: &str, timestamp: i64, body: &str) -> Result<String, String> {
    let key = BASE64
        .decode(secret.trim_start_matches("whsec_"))
        .map_err(|e| format!("the webhook secret is not base64: {e}"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
    mac.update(format!("{event_id}.{timestamp}.{body}").as_bytes());
    Ok(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())))
}

/// Whether an address is one a webhook may be sent to: not loopback,
/// private, link-local, shared (CGNAT), multicast, broadcast, unspecified,
/// documentation or reserved; IPv4-mapped IPv6 addresses are judged as IPv4;
/// addresses that tunnel to IPv4 (NAT64, 6to4, Teredo, SIIT) are never
/// public, nor any range the IANA special-purpose registries mark not
/// globally reachable (the 6to4 relay, discard, 2001::/23 but its global
/// sub-ranges, 3fff::/20, 5f00::/16).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_unspecified()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast (deprecated)
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let first = s[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0) // IPv4-translated, ::ffff:0:0:0/96
        || (first == 0x0100 && s[1..3] == [0, 0] && s[3] <= 1) // discard-only 100::/64, dummy prefix 100:0:0:1::/64
        || is_ietf_protocol_v6(s) // 2001::/23 but its global sub-ranges
        || (first == 0x3fff && s[1] < 0x1000) // documentation, 3fff::/20
        || first == 0x5f00 // segment routing SIDs, 5f00::/16
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (first == 0x2001 && s[1] == 0x0db8) // documentation
        // The IPv6-to-IPv4 translations and tunnels carry a packet to an
        // IPv4 address inside the IPv6 one, through a relay or translator.
        // They are refused outright rather than judged by that inner
        // address: Teredo's is obfuscated and sits behind a NAT the relay
        // sees, not us, and both tunnels are deprecated (RFC 7526 for
        // 6to4), so no receiver needs them.
        || (first == 0x0064 && s[1] == 0xff9b) // NAT64, 64:ff9b::/96 and 64:ff9b:1::/48
        || first == 0x2002 // 6to4, 2002::/16
        || (first == 0x2001 && s[1] == 0x0000) // Teredo, 2001::/32
        || ip.to_ipv4().is_some_and(|v4| !is_public_v4(v4))) // IPv4-compatible
}

/// 2001::/23, the IETF protocol assignments, which the IANA registry marks
/// not globally reachable but for the sub-ranges it marks reachable (the
/// PCP and TURN anycast addresses, AMT, AS112, ORCHIDv2, drone remote ID).
/// Teredo (2001::/32) and benchmarking (2001:2::/48) fall in it.
fn is_ietf_protocol_v6(s: [u16; 8]) -> bool {
    let global = (s[1] == 0x0001 && s[2..7] == [0; 5] && (1..=3).contains(&s[7]))
        || s[1] == 0x0003
        || (s[1] == 0x0004 && s[2] == 0x0112)
        || (0x0020..=0x003f).contains(&s[1]);
    s[0] == 0x2001 && s[1] < 0x0200 && !global
}

/// A webhook URL, checked for shape: `http` or `https`, with a host.
pub fn parse_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL".into());
    }
    if url.host().is_none() {
        return Err("must name a host".into());
    }
    if text.len() > 2048 {
        return Err("must be at most 2048 characters".into());
    }
    Ok(url)
}

/// A URL a tenant gave (a webhook's, a filing endpoint's), checked for
/// shape and for where its host resolves ([`resolve_checked`]): the check
/// at registration.
pub async fn check_url(text: &str, allow_private: bool) -> Result<url::Url, String> {
    let url = parse_url(text)?;
    resolve_checked(&url, allow_private).await?;
    Ok(url)
}

/// How long resolving a webhook's host may take, at registration (then a
/// 422) and at each delivery (then a failed attempt). The system resolver
/// has no deadline of its own that we control.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves the URL's host and returns the addresses to connect to, after
/// checking that every one is public (unless private addresses are
/// allowed). Connecting only to the addresses checked is what stops a DNS
/// answer from changing between check and use.
pub async fn resolve_checked(
    url: &url::Url,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, String> {
    resolve_checked_with(url, allow_private, DNS_TIMEOUT, |domain, port| async move {
        tokio::net::lookup_host((domain.as_str(), port))
            .await
            .map(Iterator::collect)
    })
    .await
}

/// [`resolve_checked`] with the resolver and its deadline given, so tests
/// can stand in a resolver that never answers.
async fn resolve_checked_with<F, Fut>(
    url: &url::Url,
    allow_private: bool,
    timeout: Duration,
    lookup: F,
) -> Result<Vec<SocketAddr>, String>
where
    F: FnOnce(String, u16) -> Fut,
    Fut: Future<Output = std::io::Result<Vec<SocketAddr>>>,
{
    let port = url.port_or_known_default().ok_or("has no port")?;
    let addrs: Vec<SocketAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
        Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
        Some(url::Host::Domain(domain)) => {
            return lookup_checked(domain, port, allow_private, timeout, lookup).await;
        }
        None => return Err("must name a host".into()),
    };
    only_public(addrs, allow_private)
}

/// Resolves `domain` within `timeout` and checks every address it
/// resolves to ([`only_public`]).
async fn lookup_checked<F, Fut>(
    domain: &str,
    port: u16,
    allow_private: bool,
    timeout: Duration,
    lookup: F,
) -> Result<Vec<SocketAddr>, String>
where
    F: FnOnce(String, u16) -> Fut,
    Fut: Future<Output = std::io::Result<Vec<SocketAddr>>>,
{
    let addrs = match tokio::time::timeout(timeout, lookup(domain.to_owned(), port)).await {
        Ok(Ok(addrs)) => addrs,
        Ok(Err(e)) => return Err(format!("host {domain:?} does not resolve: {e}")),
        Err(_) => {
            return Err(format!(
                "host {domain:?} did not resolve within {}s",
                timeout.as_secs_f64()
            ));
        }
    };
    only_public(addrs, allow_private)
}

/// The addresses, when there is one and each is public (or private ones
/// are allowed); else why not.
fn only_public(addrs: Vec<SocketAddr>, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    if addrs.is_empty() {
        return Err("host resolves to no address".into());
    }
    if let Some(bad) = addrs.iter().find(|a| !allow_private && !is_public(a.ip())) {
        return Err(format!(
            "resolves to {}, which is not a public address (set WEBHOOK_ALLOW_PRIVATE=true to allow it)",
            bad.ip()
        ));
    }
    Ok(addrs)
}

/// The resolver of the outbound client: every name is resolved and its
/// addresses checked ([`lookup_checked`]) each time the client opens a
/// connection, and the connection goes to the very addresses checked, so
/// no DNS answer can change between check and use. (An address written in
/// the URL is not resolved; [`send_signed`] checks it.)
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let domain = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port in.
            let addrs = lookup_checked(
                &domain,
                0,
                allow_private,
                DNS_TIMEOUT,
                |domain, port| async move {
                    tokio::net::lookup_host((domain.as_str(), port))
                        .await
                        .map(Iterator::collect)
                },
            )
            .await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The process's one client for requests to tenants' URLs, per address
/// policy, so that requests to one receiver reuse its connections (and
/// their TLS sessions) rather than open new ones. It passes the address
/// guard: names resolve through [`GuardedResolver`]; never through a
/// proxy, whatever `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY` say (reqwest
/// honours them by default), since through a proxy the address connected
/// to would be the proxy's choice; redirects are not followed. Each request
/// sets its own timeout and `User-Agent`.
fn guarded_client(allow_private: bool) -> Result<reqwest::Client, String> {
    static PUBLIC_ONLY: OnceLock<reqwest::Client> = OnceLock::new();
    static ANY_ADDRESS: OnceLock<reqwest::Client> = OnceLock::new();
    let cell = if allow_private {
        &ANY_ADDRESS
    } else {
        &PUBLIC_ONLY
    };
    if let Some(client) = cell.get() {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver { allow_private }))
        .build()
        .map_err(|e| e.to_string())?;
    Ok(cell.get_or_init(|| client).clone())
}

/// The most of a receiver's answer (a webhook's, a filing endpoint's) that
/// is read: the rest is never read, and the connection is dropped.
pub const ANSWER_LIMIT: usize = 64 * 1024;

/// A receiver's answer, read to at most [`ANSWER_LIMIT`] bytes.
pub struct Answer {
    pub status: u16,
    /// The body as far as it was read.
    pub body: Vec<u8>,
    /// Whether the body was longer than [`ANSWER_LIMIT`] (then `body`
    /// holds none of it).
    pub over_size: bool,
}

impl Answer {
    /// The body as text, for an error message or a JSON parse.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What to send in a [`signed_post`].
pub struct SignedPost<'a> {
    pub url: &'a str,
    pub secret: &'a str,
    /// The `webhook-id`, which the signature covers.
    pub id: &'a str,
    /// Sent as `Idempotency-Key` too, when given.
    pub idempotency_key: Option<&'a str>,
    pub body: String,
    pub allow_private: bool,
    pub timeout: Duration,
    pub user_agent: &'a str,
    /// The W3C `traceparent` whose span the request's span continues;
    /// `None`: the current span's (a new trace outside any).
    pub parent: Option<&'a str>,
}

/// One signed POST (Standard Webhooks) through [`guarded_client`], its
/// answer read to at most [`ANSWER_LIMIT`] bytes; or why there was no
/// answer (a refused address or secret, a timeout, a failed connection).
///
/// It is an HTTP client span, `POST`, with the attributes of OpenTelemetry's
/// semantic conventions, and the receiver gets its `traceparent`.
pub async fn signed_post(post: SignedPost<'_>) -> Result<Answer, String> {
    let span = tracing::info_span!(
        "POST",
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = "POST",
        url.full = Empty,
        server.address = Empty,
        server.port = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    // Only when traced: without traces the span is disabled.
    if !span.is_disabled() {
        if let Ok(url) = url::Url::parse(post.url) {
            span.record("url.full", url_in_span(&url));
            span.record("server.address", url.host_str().unwrap_or_default());
            // Integers, as OpenTelemetry's conventions type them: a `u16`
            // would reach the exporter as a string.
            span.record("server.port", url.port_or_known_default().map(i64::from));
        }
        if let Some(parent) = post.parent {
            let fields = HashMap::from([("traceparent".to_owned(), parent.to_owned())]);
            let _ = span.set_parent(global::get_text_map_propagator(|p| p.extract(&fields)));
        }
    }
    let answer = send_signed(post, &span).instrument(span.clone()).await;
    match &answer {
        Ok(answer) => {
            span.record("http.response.status_code", i64::from(answer.status));
            if answer.status >= 400 {
                span.record("error.type", tracing::field::display(answer.status));
                span.record("otel.status_code", "error");
            }
        }
        Err(_) => {
            span.record("error.type", "_OTHER");
            span.record("otel.status_code", "error");
        }
    }
    answer
}

/// A URL as a span shows it: without credentials, query or fragment, which
/// may carry a tenant's secrets.
fn url_in_span(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

async fn send_signed(post: SignedPost<'_>, span: &tracing::Span) -> Result<Answer, String> {
    let url = parse_url(post.url)?;
    // A name is checked as the client resolves it; an address in the URL
    // here.
    if !matches!(url.host(), Some(url::Host::Domain(_))) {
        resolve_checked(&url, post.allow_private).await?;
    }
    let client = guarded_client(post.allow_private)?;
    let timestamp = shared::time::now_ms() / 1000;
    let signature = sign(post.secret, post.id, timestamp, &post.body)?;
    let mut request = client
        .post(url)
        .timeout(post.timeout)
        .header("user-agent", post.user_agent)
        .header("content-type", "application/json")
        .header("webhook-id", post.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature);
    if let Some(key) = post.idempotency_key {
        request = request.header("idempotency-key", key);
    }
    if !span.is_disabled() {
        let mut fields = HashMap::new();
        global::get_text_map_propagator(|p| p.inject_context(&span.context(), &mut fields));
        for (name, value) in fields {
            request = request.header(name, value);
        }
    }
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            format!("no answer within {}s", post.timeout.as_secs_f64())
        } else {
            with_causes(&e)
        }
    };
    let response = request.body(post.body).send().await.map_err(failed)?;
    let status = response.status().as_u16();
    let (body, over_size) = read_capped(response, ANSWER_LIMIT).await.map_err(failed)?;
    Ok(Answer {
        status,
        body,
        over_size,
    })
}

/// An error and its causes, `: `-joined: reqwest's own message names only
/// the request, its causes what failed (a refused address, a refused
/// connection).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        message.push_str(": ");
        message.push_str(&error.to_string());
        cause = error.source();
    }
    message
}

/// At most `cap` bytes of a body, read as it comes; a longer body (by its
/// `Content-Length` or as read) is `(empty, true)`, and the response, with
/// its connection, is dropped unread beyond that point.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Ok((Vec::new(), true));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Ok((Vec::new(), true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for text in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(text.parse().unwrap()), "{text}");
        }
        for text in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(text.parse().unwrap()), "{text}");
        }
    }

    #[test]
    fn addresses_that_tunnel_to_ipv4_are_not_public() {
        for text in [
            // 6to4 (2002::/16) of 192.168.1.1, 10.0.0.1, 127.0.0.1, and of
            // a public 8.8.8.8: the whole range is refused.
            "2002:c0a8:0101::1",
            "2002:0a00:0001::",
            "2002:7f00:0001::1",
            "2002:0808:0808::1",
            // Teredo (2001::/32): server 65.54.227.120, client behind NAT.
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:0000:0a00:0001::1",
            "2001::1",
            // NAT64, the well-known and the local-use prefixes.
            "64:ff9b::808:808",
            "64:ff9b:1::a00:1",
            // IPv4-compatible (deprecated) forms of private addresses.
            "::10.0.0.1",
            "::192.168.0.1",
        ] {
            assert!(!is_public(text.parse().unwrap()), "{text}");
        }
        // Next to those ranges, ordinary global addresses stay public.
        for text in [
            "2001:4860:4860::8888",
            "2001:1::1",
            "2003::1",
            "2a00:1450:4001::1",
        ] {
            assert!(is_public(text.parse().unwrap()), "{text}");
        }
    }

    /// Every range the IANA special-purpose registries (IPv4 and IPv6)
    /// mark not globally reachable, by its first and last address.
    #[test]
    fn the_special_purpose_ranges_not_globally_reachable_are_not_public() {
        for text in [
            // IPv4
            "0.0.0.0",
            "0.255.255.255",
            "10.255.255.255",
            "100.64.0.0",
            "100.127.255.255",
            "127.255.255.255",
            "169.254.0.0",
            "172.31.255.255",
            "192.0.0.0",
            "192.0.0.255",
            "192.0.2.255",
            "192.88.99.0",
            "192.88.99.1",
            "192.88.99.255",
            "192.168.255.255",
            "198.18.0.0",
            "198.19.255.255",
            "198.51.100.1",
            "203.0.113.1",
            "240.0.0.0",
            "255.255.255.254",
            // IPv6
            "::ffff:0:0:0",
            "::ffff:0:7f00:1",
            "::ffff:0:808:808",
            "::ffff:0:ffff:ffff",
            "100::",
            "100::1",
            "100::ffff:ffff:ffff:ffff",
            "100:0:0:1::1",
            "2001::",
            "2001:2::1",
            "2001:10::1",
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:1::4",
            "2001:db8:ffff::1",
            "2002::1",
            "3fff::1",
            "3fff:fff:ffff::1",
            "5f00::1",
            "64:ff9b::1",
            "64:ff9b:1:ffff::1",
            "fc00::",
            "fdff:ffff::1",
            "fe80::",
            "febf:ffff::1",
            "fec0::1",
        ] {
            assert!(!is_public(text.parse().unwrap()), "{text}");
        }
        // The ones the registries mark globally reachable, and neighbours
        // just outside the ranges above.
        for text in [
            "192.88.98.255",
            "192.88.100.0",
            "198.17.255.255",
            "198.20.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "223.255.255.255",
            "::ffff:1:808:808",
            "100:0:0:2::1",
            "ff::1",
            "101::1",
            "2001:1::1",
            "2001:1::3",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:3f::1",
            "2001:200::1",
            "2620:4f:8000::1",
            "3fff:1000::1",
            "5f01::1",
        ] {
            assert!(is_public(text.parse().unwrap()), "{text}");
        }
    }

    fn url(text: &str) -> url::Url {
        parse_url(text).unwrap()
    }

    #[tokio::test]
    async fn a_resolver_that_does_not_answer_in_time_is_an_error() {
        let never = |_: String, _: u16| std::future::pending::<std::io::Result<Vec<SocketAddr>>>();

        let result = resolve_checked_with(
            &url("https://hooks.example.com/x"),
            false,
            Duration::from_millis(50),
            never,
        )
        .await;

        let message = result.expect_err("a resolution that never ends");
        assert!(message.contains("did not resolve within"), "{message}");
    }

    #[tokio::test]
    async fn every_resolved_address_is_checked_and_the_checked_ones_returned() {
        let answer = |addrs: &'static [&'static str]| {
            move |_: String, port: u16| async move {
                Ok(addrs
                    .iter()
                    .map(|a| SocketAddr::new(a.parse().unwrap(), port))
                    .collect())
            }
        };
        let hook = url("https://hooks.example.com/x");

        let public = resolve_checked_with(
            &hook,
            false,
            DNS_TIMEOUT,
            answer(&["93.184.216.34", "2606:4700::1111"]),
        )
        .await;
        let one_private = resolve_checked_with(
            &hook,
            false,
            DNS_TIMEOUT,
            answer(&["93.184.216.34", "2002:c0a8:0101::1"]),
        )
        .await;
        let allowed = resolve_checked_with(&hook, true, DNS_TIMEOUT, answer(&["127.0.0.1"])).await;
        let none = resolve_checked_with(&hook, false, DNS_TIMEOUT, answer(&[])).await;

        assert_eq!(
            public.unwrap(),
            vec![
                "93.184.216.34:443".parse::<SocketAddr>().unwrap(),
                "[2606:4700::1111]:443".parse().unwrap()
            ]
        );
        let refused = one_private.expect_err("one private address refuses the host");
        assert!(refused.contains("2002:c0a8:101::1"), "{refused}");
        assert_eq!(allowed.unwrap(), vec!["127.0.0.1:443".parse().unwrap()]);
        assert!(none.is_err());
    }

    /// A receiver on loopback that answers every request `200 ok` and
    /// keeps each connection open; counts the connections it accepted.
    async fn counting_receiver() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: its head, then as many bytes as its
                        // Content-Length says.
                        let request_end = loop {
                            if let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n")
                            {
                                let head = String::from_utf8_lossy(&buffer[..head_end]);
                                let length: usize = head
                                    .lines()
                                    .find_map(|line| {
                                        let (name, value) = line.split_once(':')?;
                                        name.eq_ignore_ascii_case("content-length")
                                            .then(|| value.trim().parse().ok())?
                                    })
                                    .unwrap_or(0);
                                if buffer.len() >= head_end + 4 + length {
                                    break head_end + 4 + length;
                                }
                            }
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
                            }
                        };
                        buffer.drain(..request_end);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if socket.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("127.0.0.1:{port}"), accepted)
    }

    fn post_to(url: &str, allow_private: bool) -> SignedPost<'_> {
        SignedPost {
            url,
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            id: "msg_1",
            idempotency_key: None,
            body: "{}".to_owned(),
            allow_private,
            timeout: Duration::from_secs(10),
            user_agent: "Receipt-Test",
            parent: None,
        }
    }

    #[tokio::test]
    async fn posts_to_one_receiver_share_one_connection() {
        let (address, accepted) = counting_receiver().await;
        let url = format!("http://{address}/hook");

        for _ in 0..3 {
            let answer = signed_post(post_to(&url, true)).await.expect("an answer");
            assert_eq!((answer.status, answer.text()), (200, "ok".to_owned()));
        }

        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_a_private_address_is_refused_at_the_post() {
        let (address, accepted) = counting_receiver().await;
        let port = address.rsplit_once(':').unwrap().1;
        let by_name = format!("http://localhost:{port}/hook");
        let by_address = format!("http://{address}/hook");

        let refused = signed_post(post_to(&by_name, false)).await;
        let refused_address = signed_post(post_to(&by_address, false)).await;
        let allowed = signed_post(post_to(&by_name, true)).await;

        for refused in [refused, refused_address] {
            let message = refused.err().expect("refused");
            assert!(message.contains("not a public address"), "{message}");
        }
        assert_eq!(allowed.expect("allowed").status, 200);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification.
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        )
        .unwrap();
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn urls_must_be_http_with_a_host() {
        assert!(parse_url("https://example.com/hook").is_ok());
        for bad in ["ftp://example.com", "mailto:a@b.c", "not a url", "http://"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
