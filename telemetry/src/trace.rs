//! Traces: spans of `tracing` exported over OTLP (HTTP, protobuf or JSON)
//! through the OpenTelemetry SDK, configured by the standard `OTEL_*`
//! variables; the W3C `traceparent` a job keeps and a request carries;
//! and the trace and span ids on JSON log lines.
//!
//! Nothing is installed unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set: then every span of ours
//! is a `tracing` span that no layer wants, which costs nothing, and
//! every helper here answers "no context".

use std::{
    collections::HashMap,
    fmt,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use opentelemetry::{
    Context,
    global::{self, BoxedTracer},
    trace::{SpanContext, TraceContextExt, TracerProvider as _},
};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing::{Subscriber, level_filters::LevelFilter};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    Layer, Registry,
    filter::Targets,
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

/// The instrumentation scope of every span Receipt makes.
pub const SCOPE: &str = "receipt";

/// The crates whose spans (and events inside them) are exported. Others
/// (apalis, sqlx, actix) make spans of their own that would start traces
/// of their own.
const TRACED: [&str; 7] = [
    "api",
    "worker",
    "reports",
    "outbound",
    "queue",
    "store",
    "telemetry",
];

/// Whether this process exports traces (set once, at start).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces: spans made with OpenTelemetry's
/// API, which no `tracing` filter stops, are made only then.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Whether a span's target is one of the crates whose spans are exported.
pub(crate) fn is_ours(target: &str) -> bool {
    TRACED.iter().any(|crate_name| {
        target
            .strip_prefix(crate_name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// An `OTEL_*` variable that does not parse, or asks for what is not built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// What the standard variables ask of the exporter. The SDK reads the
/// rest of them itself, as the specification has it (the endpoint, with
/// `/v1/traces` appended to `OTEL_EXPORTER_OTLP_ENDPOINT`; headers;
/// timeout; `OTEL_TRACES_SAMPLER` and its argument; `OTEL_SERVICE_NAME`
/// and `OTEL_RESOURCE_ATTRIBUTES`; the batch settings `OTEL_BSP_*`): this
/// only decides whether to export at all, and refuses at start what the
/// SDK would silently replace with a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    pub protocol: Protocol,
}

impl TraceConfig {
    /// `None` when no endpoint is set (or `OTEL_SDK_DISABLED=true`, or
    /// `OTEL_TRACES_EXPORTER=none`): no traces.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(ConfigError(format!(
                    "OTEL_TRACES_EXPORTER={other} is not supported: use otlp (the default) or none"
                )));
            }
        }
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        let (name, protocol) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            Some(value) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Some(value)),
            None => (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                var("OTEL_EXPORTER_OTLP_PROTOCOL"),
            ),
        };
        let protocol = match protocol.as_deref().map(str::trim) {
            None | Some("http/protobuf") => Protocol::HttpBinary,
            Some("http/json") => Protocol::HttpJson,
            Some(other) => {
                return Err(ConfigError(format!(
                    "{name}={other} is not supported: use http/protobuf (the default) or http/json"
                )));
            }
        };
        check_sampler(&var)?;
        Ok(Some(TraceConfig { protocol }))
    }
}

/// `OTEL_TRACES_SAMPLER` and its argument, as the SDK will read them.
fn check_sampler(var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let Some(sampler) = var("OTEL_TRACES_SAMPLER") else {
        return Ok(());
    };
    match sampler.trim() {
        "always_on" | "always_off" | "parentbased_always_on" | "parentbased_always_off" => Ok(()),
        "traceidratio" | "parentbased_traceidratio" => {
            let ratio = var("OTEL_TRACES_SAMPLER_ARG");
            match ratio.as_deref().map(|r| r.trim().parse::<f64>()) {
                // The specification's default ratio.
                None => Ok(()),
                Some(Ok(r)) if (0.0..=1.0).contains(&r) => Ok(()),
                Some(_) => Err(ConfigError(format!(
                    "OTEL_TRACES_SAMPLER_ARG={} must be a ratio from 0 to 1",
                    ratio.unwrap_or_default()
                ))),
            }
        }
        other => Err(ConfigError(format!(
            "OTEL_TRACES_SAMPLER={other} is not supported: use always_on, always_off, \
             traceidratio or their parentbased_ forms"
        ))),
    }
}

/// The trace pipeline of a process, when there is one. Shut it down before
/// the process exits, so that its last spans are sent.
#[derive(Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Builds the exporter and the tracer provider, and makes them (and
    /// the W3C trace-context propagator) the process's global ones.
    pub fn start(config: &TraceConfig, service: &'static str) -> Result<Self, ConfigError> {
        let client = BlockingClient::new(export_timeout())
            .map_err(|e| ConfigError(format!("cannot make the OTLP client: {e}")))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(config.protocol)
            .with_http_client(client)
            .build()
            .map_err(|e| ConfigError(format!("the OTLP exporter: {e}")))?;
        let resource = Resource::builder().build();
        let named = resource
            .get(&opentelemetry::Key::from_static_str("service.name"))
            .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
        let resource = if named {
            resource
        } else {
            Resource::builder().with_service_name(service).build()
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        global::set_tracer_provider(provider.clone());
        global::set_text_map_propagator(TraceContextPropagator::new());
        EXPORTING.store(true, Ordering::Relaxed);
        Ok(Telemetry {
            provider: Some(provider),
        })
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.provider.is_some()
    }

    /// The layer that turns our crates' `tracing` spans into OpenTelemetry
    /// spans.
    pub(crate) fn layer(&self) -> Option<Box<dyn Layer<Registry> + Send + Sync>> {
        let provider = self.provider.as_ref()?;
        let targets = Targets::new().with_targets(TRACED.map(|t| (t, LevelFilter::INFO)));
        Some(Box::new(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer(SCOPE))
                .with_tracked_inactivity(false)
                .with_filter(targets),
        ))
    }

    /// Sends the spans still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "could not send the last spans");
        }
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT`
/// (milliseconds), 10 s by default: how long one export may take.
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The exporter's HTTP client: the workspace's reqwest, blocking, since
/// the SDK's batch processor exports from a thread of its own, outside
/// any tokio runtime.
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    fn new(timeout: Duration) -> Result<Self, String> {
        // A blocking client starts a runtime of its own, which may not be
        // done from inside the binaries' tokio runtime: on a thread.
        std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .build()
                .map(BlockingClient)
                .map_err(|e| e.to_string())
        })
        .join()
        .map_err(|_| "the thread making it panicked".to_owned())?
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut sent = self.0.request(parts.method, parts.uri.to_string());
        for (name, value) in &parts.headers {
            sent = sent.header(name, value);
        }
        let answer = sent.body(body.to_vec()).send()?;
        let mut response = Response::builder().status(answer.status().as_u16());
        for (name, value) in answer.headers() {
            response = response.header(name, value);
        }
        Ok(response.body(answer.bytes()?)?)
    }
}

/// The tracer of spans made with OpenTelemetry's API rather than
/// `tracing` (those whose start or parent is known only afterwards): a
/// no-op one when nothing is exported.
pub fn tracer() -> BoxedTracer {
    global::tracer(SCOPE)
}

/// The W3C `traceparent` of a span, if it belongs to a trace: what a job
/// keeps, and what an outbound request carries.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    traceparent_of(&span.context())
}

/// The W3C `traceparent` of a context's span, if any.
pub fn traceparent_of(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut fields = HashMap::new();
    global::get_text_map_propagator(|propagator| propagator.inject_context(cx, &mut fields));
    fields.remove("traceparent")
}

/// The remote context a stored or received `traceparent` names (an empty
/// context when it names none, or is not one).
pub fn context_from(traceparent: Option<&str>) -> Context {
    let Some(traceparent) = traceparent else {
        return Context::new();
    };
    let fields = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    global::get_text_map_propagator(|propagator| propagator.extract(&fields))
}

/// The span a stored or received `traceparent` names, if it is one.
pub fn span_context_from(traceparent: Option<&str>) -> Option<SpanContext> {
    let cx = context_from(traceparent);
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// Makes `span` a child of the remote span `traceparent` names, if any.
/// A no-op without traces (no layer to take it).
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let cx = context_from(traceparent);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The event formatter of JSON lines with `trace_id` and `span_id` added
/// when the event happens inside a span of a sampled trace, so that a log
/// shipper can join lines to traces.
pub struct WithTraceIds<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        // The current span, not the formatter's view of it: spans of ours
        // are hidden from the log's layer.
        let cx = tracing::Span::current().context();
        let ids = Some(cx.span().span_context().clone())
            .filter(|span| span.is_valid() && span.is_sampled());
        let Some(ids) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // One JSON object and a line feed: the ids go in before its brace.
        let object = line.trim_end();
        match object.strip_suffix('}') {
            Some(fields) => {
                let comma = if fields.trim_end().ends_with('{') {
                    ""
                } else {
                    ","
                };
                writeln!(
                    writer,
                    "{fields}{comma}\"trace_id\":\"{}\",\"span_id\":\"{}\"}}",
                    ids.trace_id(),
                    ids.span_id()
                )
            }
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Option<TraceConfig>, ConfigError> {
        TraceConfig::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn no_endpoint_means_no_traces_whatever_else_is_set() {
        assert_eq!(config(&[]), Ok(None));
        assert_eq!(
            config(&[
                ("OTEL_SERVICE_NAME", "x"),
                ("OTEL_TRACES_SAMPLER", "always_on")
            ]),
            Ok(None)
        );
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(config(&[endpoint, ("OTEL_SDK_DISABLED", "true")]), Ok(None));
        assert_eq!(
            config(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(None)
        );
    }

    #[test]
    fn either_endpoint_turns_traces_on_with_http_protobuf_by_default() {
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            assert_eq!(
                config(&[(name, "http://collector:4318")]),
                Ok(Some(TraceConfig {
                    protocol: Protocol::HttpBinary
                }))
            );
        }
        let json = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ]);
        assert_eq!(
            json,
            Ok(Some(TraceConfig {
                protocol: Protocol::HttpJson
            }))
        );
    }

    #[test]
    fn what_the_sdk_would_replace_with_a_default_is_refused() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ] {
            let error = config(&[endpoint, (name, value)]).expect_err(value);
            assert!(error.0.contains(name), "{error}");
        }
        for ratio in ["2", "half", "-0.1"] {
            let error = config(&[
                endpoint,
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", ratio),
            ])
            .expect_err(ratio);
            assert!(error.0.contains("OTEL_TRACES_SAMPLER_ARG"), "{error}");
        }
        assert!(
            config(&[
                endpoint,
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ])
            .is_ok()
        );
    }

    #[test]
    fn a_traceparent_goes_through_the_propagator_both_ways() {
        global::set_text_map_propagator(TraceContextPropagator::new());
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

        let cx = context_from(Some(text));

        let span = span_context_from(Some(text)).expect("a span");
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(span.is_remote() && span.is_sampled());
        assert_eq!(traceparent_of(&cx).as_deref(), Some(text));
        assert!(span_context_from(Some("00-not-a-trace")).is_none());
        assert!(span_context_from(None).is_none());
        assert_eq!(traceparent_of(&Context::new()), None);
    }
}
