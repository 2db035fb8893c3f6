//! The spans of an attempt: `process {queue}` (a consumer span, the
//! attempt itself), with the claim, the kind's run and the result write
//! as its children. Which trace an attempt joins is decided here
//! ([`JOIN_WITHIN`]); docs/observability.md says why.
//!
//! The attempt's parent is the job's stored trace context, which only the
//! claim reads: so the attempt and its claim are made with OpenTelemetry's
//! API once the claim has answered, with the time the message arrived as
//! their start. A delivery that claims nothing (a duplicate, a parked job)
//! makes no span at all.

use std::time::{Duration, SystemTime};

use opentelemetry::{
    Context, KeyValue,
    trace::{Link, Span as _, SpanKind, Status, TraceContextExt, Tracer},
};
use shared::{model::AttemptOutcome, time::now_ms};
use store::Claim;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// An attempt that starts within this long of its job's submit is a child
/// of the submit's span, in its trace; a later one (a delayed job, a long
/// backlog, a late retry) starts a trace of its own, linked to the
/// submit's: a trace that spans hours or days is one that trace backends
/// cut up or drop, and that no waterfall shows readably.
pub(crate) const JOIN_WITHIN: Duration = Duration::from_secs(10 * 60);

/// The `messaging.system` of our spans: the queue is Receipt's own,
/// whichever store carries its messages.
const MESSAGING_SYSTEM: &str = "receipt";

/// The spans of one attempt, when traces are exported.
pub(crate) struct AttemptSpan {
    cx: Context,
}

impl AttemptSpan {
    /// The attempt's span, started when its message arrived, and its
    /// claim's span, ended now; `None` when no traces are exported.
    pub(crate) fn start(destination: &str, claim: &Claim, arrived: SystemTime) -> Option<Self> {
        if !telemetry::trace::exporting() {
            return None;
        }
        let tracer = telemetry::trace::tracer();
        let submit = telemetry::trace::span_context_from(claim.traceparent.as_deref());
        let late = now_ms().saturating_sub(claim.created_at)
            > i64::try_from(JOIN_WITHIN.as_millis()).unwrap_or(i64::MAX);
        let (parent, link) = match submit {
            Some(submit) if !late => {
                let parent = Context::new().with_remote_span_context(submit.clone());
                // A retry is the submit's child too; its link says so.
                (parent, (claim.attempt > 1).then_some(submit))
            }
            Some(submit) => (Context::new(), Some(submit)),
            // A schedule's fire, or a job made untraced: a trace of its own.
            None => (Context::new(), None),
        };
        let span = tracer
            .span_builder(format!("process {destination}"))
            .with_kind(SpanKind::Consumer)
            .with_start_time(arrived)
            .with_attributes([
                KeyValue::new("messaging.system", MESSAGING_SYSTEM),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.operation.name", "process"),
                KeyValue::new("messaging.destination.name", destination.to_owned()),
                KeyValue::new("messaging.message.id", claim.job_id.clone()),
                KeyValue::new("receipt.job.id", claim.job_id.clone()),
                KeyValue::new("receipt.job.kind", claim.kind.clone()),
                KeyValue::new("receipt.job.attempt", claim.counted_attempt),
                KeyValue::new("receipt.tenant.id", claim.tenant_id.clone()),
            ])
            .with_links(link.map(Link::with_context).into_iter().collect())
            .start_with_context(&tracer, &parent);
        let cx = Context::new().with_span(span);
        tracer
            .span_builder("claim")
            .with_kind(SpanKind::Internal)
            .with_start_time(arrived)
            .with_attributes([KeyValue::new("receipt.job.id", claim.job_id.clone())])
            .start_with_context(&tracer, &cx)
            .end();
        Some(AttemptSpan { cx })
    }

    /// Makes `span` (the run, the write) a child of the attempt's span.
    pub(crate) fn adopt(&self, span: &tracing::Span) {
        let _ = span.set_parent(self.cx.clone());
    }

    /// Ends the attempt's span with its outcome (`None`: superseded).
    pub(crate) fn end(self, outcome: Option<&AttemptOutcome>) {
        let span = self.cx.span();
        let (name, error) = match outcome {
            None => ("superseded", None),
            Some(AttemptOutcome::Succeeded { .. } | AttemptOutcome::SucceededInChunks { .. }) => {
                ("succeeded", None)
            }
            Some(AttemptOutcome::Failed { error }) => ("failed", Some(error)),
            Some(AttemptOutcome::RetryAt { error, .. }) => ("retry", Some(error)),
            Some(AttemptOutcome::HandBack { .. }) => ("handed_back", None),
            Some(AttemptOutcome::Cancelled) => ("cancelled", None),
        };
        span.set_attribute(KeyValue::new("receipt.attempt.outcome", name));
        if let Some(error) = error {
            span.set_attribute(KeyValue::new("error.type", error.error_type.clone()));
            span.set_status(Status::error(error.message.clone()));
        }
        span.end();
    }
}
