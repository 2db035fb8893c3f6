//! Traces, end to end: the api and the worker export their spans over
//! OTLP/HTTP (protobuf) to a collector inside the test, which decodes them
//! with OpenTelemetry's own generated types; the webhook receiver records
//! the `traceparent` each delivery carries. One job makes one connected
//! trace, from the submit to the webhook delivery, across processes.

use std::{collections::HashMap, sync::Arc, time::Duration};

use actix_web::{HttpRequest, HttpResponse, web};
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value, trace::v1::span,
};
use prost::Message;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    common::{Announcements, Api, Backend, Process, Record, TestEnv, serve_on_loopback, wait},
    on_both_backends,
};

const WITHIN: Duration = Duration::from_secs(30);

/// One span as the collector received it; ids in lowercase hex.
#[derive(Debug, Clone)]
pub struct Seen {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    pub kind: span::SpanKind,
    pub attributes: HashMap<String, String>,
    /// Each attribute's OTLP type: `string`, `int`, `bool` or `double`.
    pub attribute_types: HashMap<String, &'static str>,
    /// `(trace_id, span_id)` of each link.
    pub links: Vec<(String, String)>,
}

impl Seen {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn attribute_type(&self, key: &str) -> Option<&str> {
        self.attribute_types.get(key).copied()
    }

    pub fn is_child_of(&self, parent: &Seen) -> bool {
        self.trace_id == parent.trace_id && self.parent_span_id == parent.span_id
    }
}

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces`, protobuf.
pub struct Collector {
    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` names (the exporter appends
    /// `/v1/traces`).
    endpoint: String,
    spans: Arc<Record<Seen>>,
    /// Requests that were not a trace export it could decode.
    refused: Arc<Record<String>>,
    handle: actix_web::dev::ServerHandle,
}

struct Shared {
    spans: Arc<Record<Seen>>,
    refused: Arc<Record<String>>,
}

fn type_of(value: Option<&any_value::Value>) -> &'static str {
    match value {
        Some(any_value::Value::StringValue(_)) => "string",
        Some(any_value::Value::IntValue(_)) => "int",
        Some(any_value::Value::BoolValue(_)) => "bool",
        Some(any_value::Value::DoubleValue(_)) => "double",
        _ => "other",
    }
}

fn text(value: Option<&any_value::Value>) -> String {
    match value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

async fn export(shared: web::Data<Shared>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if request.path() != "/v1/traces" || content_type != "application/x-protobuf" {
        shared
            .refused
            .push(format!("{} {}", request.path(), content_type));
        return HttpResponse::NotFound().finish();
    }
    let Ok(export) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        shared.refused.push("a body that is not protobuf".into());
        return HttpResponse::BadRequest().finish();
    };
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                shared.spans.push(Seen {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: span.kind(),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                            (kv.key.clone(), text(value))
                        })
                        .collect(),
                    attribute_types: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                            (kv.key.clone(), type_of(value))
                        })
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
                        .collect(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything was taken.
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .finish()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Collector {
    pub fn start() -> Self {
        let shared = Shared {
            spans: Arc::default(),
            refused: Arc::default(),
        };
        let (spans, refused) = (shared.spans.clone(), shared.refused.clone());
        let (addr, handle) = serve_on_loopback(web::Data::new(shared), export);
        Collector {
            endpoint: format!("http://{addr}"),
            spans,
            refused,
            handle,
        }
    }

    /// The settings that make a process export its spans here, at once.
    pub fn settings(&self) -> [(&str, &str); 2] {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint.as_str()),
            // The batch goes out every 100 ms rather than every 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]
    }

    /// Waits for the first span that `wanted` accepts; fails naming
    /// every span received instead.
    pub async fn span(&self, what: &str, wanted: impl Fn(&Seen) -> bool) -> Seen {
        let span = wait::until_ok(what, WITHIN, async || {
            let all = self.spans.all();
            all.iter().find(|s| wanted(s)).cloned().ok_or_else(|| {
                all.iter()
                    .map(|s| format!("{} ({}, parent {:?})", s.name, s.service, s.parent_span_id))
                    .collect::<Vec<_>>()
            })
        })
        .await;
        assert!(
            self.refused.is_empty(),
            "the collector refused {:?}",
            self.refused.all()
        );
        span
    }

    /// The spans of the job's attempt: `process ...`, its claim, its run
    /// and its result write.
    async fn attempt(&self, job_id: &str) -> Attempt {
        let process = self
            .span(&format!("the attempt of {job_id}"), |s| {
                s.name.starts_with("process ") && s.attribute("receipt.job.id") == Some(job_id)
            })
            .await;
        let child = |name: &'static str| {
            let process = process.clone();
            move |s: &Seen| s.name == name && s.is_child_of(&process)
        };
        Attempt {
            claim: self.span("its claim", child("claim")).await,
            run: self.span("its run", child("run sleep")).await,
            write: self.span("its write", child("write result")).await,
            process,
        }
    }

    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

struct Attempt {
    process: Seen,
    claim: Seen,
    run: Seen,
    write: Seen,
}

/// The api and the pool of `backend`'s shape with `settings`: in one
/// process on SQLite, or an api and a `worker` on Postgres and Redis.
async fn start(
    env: &TestEnv,
    backend: Backend,
    settings: &[(&str, &str)],
) -> (Api, Option<Process>) {
    let mut settings = settings.to_vec();
    settings.push(("WEBHOOK_ALLOW_PRIVATE", "true"));
    match backend {
        Backend::Sqlite => {
            settings.push(("EMBEDDED_WORKER", "true"));
            (env.start_api(&settings).await, None)
        }
        Backend::PgRedis => {
            let worker = env.start_worker(&settings);
            settings.push(("EMBEDDED_WORKER", "false"));
            let api = env.start_api(&settings).await;
            env.wait_for_redis_consumers(1).await;
            (api, Some(worker))
        }
    }
}

/// The service the pool's spans come from.
fn pool_service(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "receipt-api",
        Backend::PgRedis => "receipt-worker",
    }
}

async fn one_trace_runs_from_the_submit_to_the_webhook_delivery(backend: Backend) {
    // Arrange: the api and the pool export to the collector; a receiver
    // of every final status.
    let collector = Collector::start();
    let env = TestEnv::new(backend).await;
    let (api, _worker) = start(&env, backend, &collector.settings()).await;
    let receiver = Announcements::start();
    receiver.subscribe(&api).await;

    // Act: a job runs to its end and is announced.
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().expect("job_id");
    assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    receiver.wait_for_job(job_id, 1, WITHIN).await;

    // Assert: submit -> attempt -> write -> delivery, one trace.
    let submit = collector
        .span("the submit", |s| {
            s.name == "POST /v1/reports/{kind}" && s.kind == span::SpanKind::Server
        })
        .await;
    assert_eq!(submit.service, "receipt-api");
    assert_eq!(submit.parent_span_id, "", "the submit starts the trace");
    assert_eq!(submit.attribute("http.request.method"), Some("POST"));
    assert_eq!(submit.attribute("http.route"), Some("/v1/reports/{kind}"));
    assert_eq!(submit.attribute("url.path"), Some("/v1/reports/sleep"));
    assert_eq!(submit.attribute("http.response.status_code"), Some("202"));
    assert_eq!(
        submit.attribute_type("http.response.status_code"),
        Some("int"),
        "OpenTelemetry's conventions type a status code as an integer"
    );

    let attempt = collector.attempt(job_id).await;
    let process = &attempt.process;
    assert!(process.is_child_of(&submit), "{process:?} of {submit:?}");
    assert_eq!(process.service, pool_service(backend));
    assert_eq!(process.kind, span::SpanKind::Consumer);
    assert_eq!(process.name, format!("process {}:jobs", env.queue_name));
    assert_eq!(process.attribute("messaging.system"), Some("receipt"));
    assert_eq!(
        process.attribute("messaging.operation.type"),
        Some("process")
    );
    assert_eq!(
        process.attribute("receipt.attempt.outcome"),
        Some("succeeded")
    );
    assert!(process.links.is_empty(), "a first attempt links nothing");
    for child in [&attempt.claim, &attempt.run, &attempt.write] {
        assert_eq!(child.kind, span::SpanKind::Internal, "{child:?}");
        assert_eq!(child.service, process.service, "{child:?}");
    }

    let delivery = collector
        .span("the webhook delivery", |s| {
            s.kind == span::SpanKind::Client && s.trace_id == submit.trace_id
        })
        .await;
    assert!(
        delivery.is_child_of(&attempt.write),
        "{delivery:?} of {:?}",
        attempt.write
    );
    assert_eq!(delivery.name, "POST");
    assert_eq!(delivery.attribute("http.request.method"), Some("POST"));
    assert_eq!(delivery.attribute("http.response.status_code"), Some("200"));
    assert_eq!(
        delivery.attribute_type("http.response.status_code"),
        Some("int")
    );
    assert_eq!(delivery.attribute_type("server.port"), Some("int"));
    assert_eq!(delivery.attribute("url.full"), Some(receiver.url.as_str()));
    assert_eq!(delivery.attribute("server.address"), Some("127.0.0.1"));

    // ... and the receiver was sent the delivery span's context.
    let sent = receiver
        .all()
        .into_iter()
        .find(|a| a.job_id == job_id)
        .and_then(|a| a.traceparent)
        .expect("the delivery carries a traceparent");
    assert_eq!(
        sent,
        format!("00-{}-{}-01", delivery.trace_id, delivery.span_id)
    );
    collector.stop().await;
}

async fn an_incoming_traceparent_is_continued_by_the_submit_and_its_job(backend: Backend) {
    // Arrange
    let collector = Collector::start();
    let env = TestEnv::new(backend).await;
    let (api, _worker) = start(&env, backend, &collector.settings()).await;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";

    // Act: a submit from a caller inside its own trace.
    let reply = Api::read(
        api.request(Method::POST, "/v1/reports/sleep")
            .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
            .json(&json!({"ms": 1})),
    )
    .await;
    assert_eq!(reply.status.as_u16(), 202, "{}", reply.text);
    let job_id = reply.json()["job_id"].as_str().expect("job_id").to_owned();
    assert_eq!(api.wait_final(&job_id).await["status"], "SUCCEEDED");

    // Assert: the submit is the caller's span's child, and the job's
    // attempt is in the caller's trace too.
    let submit = collector
        .span("the submit", |s| s.name == "POST /v1/reports/{kind}")
        .await;
    assert_eq!(submit.trace_id, caller_trace);
    assert_eq!(submit.parent_span_id, caller_span);
    let attempt = collector.attempt(&job_id).await;
    assert!(attempt.process.is_child_of(&submit));
    collector.stop().await;
}

async fn a_retried_attempt_is_linked_to_the_submit_in_the_same_trace(backend: Backend) {
    // Arrange: a job whose first attempt fails and is retried.
    let collector = Collector::start();
    let env = TestEnv::new(backend).await;
    let (api, _worker) = start(&env, backend, &collector.settings()).await;

    // Act
    let job = api.submit("sleep", json!({"ms": 1, "fail_times": 1})).await;
    let job_id = job["job_id"].as_str().expect("job_id");
    let done = api.wait_final(job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");

    // Assert: both attempts are children of the submit; the second, a
    // retry, links to it as well.
    let submit = collector
        .span("the submit", |s| s.name == "POST /v1/reports/{kind}")
        .await;
    let attempt = |n: &'static str| {
        let (submit, job_id) = (submit.clone(), job_id.to_owned());
        move |s: &Seen| {
            s.name.starts_with("process ")
                && s.attribute("receipt.job.id") == Some(job_id.as_str())
                && s.attribute("receipt.job.attempt") == Some(n)
                && s.is_child_of(&submit)
        }
    };
    let first = collector.span("the first attempt", attempt("1")).await;
    let second = collector.span("the retry", attempt("2")).await;
    assert_eq!(first.attribute("receipt.attempt.outcome"), Some("retry"));
    assert!(first.links.is_empty(), "{first:?}");
    assert_eq!(
        second.links,
        [(submit.trace_id.clone(), submit.span_id.clone())]
    );
    collector.stop().await;
}

async fn an_attempt_long_after_its_submit_starts_a_trace_linked_to_it(backend: Backend) {
    // Arrange: a delayed job, made to look submitted long ago.
    let collector = Collector::start();
    let env = TestEnv::new(backend).await;
    let (api, _worker) = start(&env, backend, &collector.settings()).await;
    let reply = Api::read(
        api.request(Method::POST, "/v1/reports/sleep?delay=2")
            .json(&json!({"ms": 1})),
    )
    .await;
    assert_eq!(reply.status.as_u16(), 202, "{}", reply.text);
    let job_id = reply.json()["job_id"].as_str().expect("job_id").to_owned();
    let hour_ago = match backend {
        Backend::Sqlite => "created_at - 3600000".to_owned(),
        Backend::PgRedis => "created_at - interval '1 hour'".to_owned(),
    };
    env.execute_sql(&format!(
        "UPDATE jobs SET created_at = {hour_ago} WHERE job_id = '{job_id}' AND status = 'QUEUED'"
    ))
    .await;

    // Act
    assert_eq!(api.wait_final(&job_id).await["status"], "SUCCEEDED");

    // Assert: the attempt is the root of a trace of its own, linked to
    // the submit's span.
    let submit = collector
        .span("the submit", |s| s.name == "POST /v1/reports/{kind}")
        .await;
    let process = collector
        .span("the attempt", |s| {
            s.name.starts_with("process ") && s.attribute("receipt.job.id") == Some(&job_id)
        })
        .await;
    assert_ne!(process.trace_id, submit.trace_id);
    assert_eq!(process.parent_span_id, "");
    assert_eq!(process.links, [(submit.trace_id, submit.span_id)]);
    collector.stop().await;
}

on_both_backends!(
    one_trace_runs_from_the_submit_to_the_webhook_delivery,
    an_incoming_traceparent_is_continued_by_the_submit_and_its_job,
    a_retried_attempt_is_linked_to_the_submit_in_the_same_trace,
    an_attempt_long_after_its_submit_starts_a_trace_linked_to_it,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_inside_a_traced_span_carry_its_trace_and_span_ids() {
    // Arrange: the embedded api logs JSON, the runner at debug.
    let collector = Collector::start();
    let env = TestEnv::new(Backend::Sqlite).await;
    let mut settings = collector.settings().to_vec();
    settings.extend([
        ("LOG_FORMAT", "json"),
        ("RUST_LOG", "warn,worker::runner=debug"),
    ]);
    let (api, _) = start(&env, Backend::Sqlite, &settings).await;

    // Act
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().expect("job_id");
    assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");

    // Assert: the line the write logs names the write's span.
    let write = collector.attempt(job_id).await.write;
    let process = api.process.as_ref().expect("the api process");
    let line = process.wait_for_line_containing("outcome recorded");
    let line: Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(line["job_id"], job_id, "{line}");
    assert_eq!(line["trace_id"], write.trace_id.as_str(), "{line}");
    assert_eq!(line["span_id"], write.span_id.as_str(), "{line}");
    collector.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_the_trace_exporter_cannot_honour_stops_the_start() {
    let env = TestEnv::new(Backend::Sqlite).await;
    for (name, value) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_TRACES_SAMPLER", "sometimes"),
    ] {
        let finished = env.run_api(
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                (name, value),
            ],
        );
        assert!(!finished.status.success(), "{name}={value}: it started");
        assert!(
            finished.stderr.contains(name),
            "{name}={value}: {}",
            finished.stderr
        );
    }
}
