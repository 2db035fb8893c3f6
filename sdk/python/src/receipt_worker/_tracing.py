"""OpenTelemetry, when it is installed: each attempt runs in a span that
continues the trace of the submit that made its job (the lease's
``traceparent``). Without ``opentelemetry`` nothing happens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .attempt import Attempt

try:  # pragma: no cover - depends on what is installed
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator as _Propagator,
    )
except ImportError:  # pragma: no cover
    _otel_trace = None  # type: ignore[assignment]
    _Propagator = None  # type: ignore[assignment,misc]

SPAN_NAME = "receipt.attempt"


def enabled() -> bool:
    return _otel_trace is not None


@contextmanager
def attempt_span(attempt: Attempt) -> Iterator[Any]:
    """A span for the attempt, current for the handler's code; ``None``
    without OpenTelemetry. An exception leaving it is recorded."""
    if _otel_trace is None or _Propagator is None:
        yield None
        return
    carrier = {"traceparent": attempt.traceparent} if attempt.traceparent else {}
    parent = _Propagator().extract(carrier)
    tracer = _otel_trace.get_tracer("receipt_worker", __version__)
    with tracer.start_as_current_span(
        f"{SPAN_NAME} {attempt.kind}",
        context=parent,
        kind=_otel_trace.SpanKind.CONSUMER,
        attributes={
            "receipt.job_id": attempt.job_id,
            "receipt.kind": attempt.kind,
            "receipt.attempt": attempt.attempt,
            "receipt.max_attempts": attempt.max_attempts,
        },
    ) as span:
        yield span


def traceparent_of(span: Any) -> str | None:
    """The ``traceparent`` naming ``span``, to send with the attempt's
    reports; ``None`` without a valid span."""
    if span is None or _Propagator is None or _otel_trace is None:
        return None
    carrier: dict[str, str] = {}
    _Propagator().inject(carrier, context=_otel_trace.set_span_in_context(span))
    return carrier.get("traceparent")


def mark_error(span: Any, error: BaseException) -> None:
    """Records on the span how the attempt failed."""
    if span is None or _otel_trace is None:
        return
    span.record_exception(error)
    span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))


def set_outcome(span: Any, outcome: str) -> None:
    if span is not None:
        span.set_attribute("receipt.outcome", outcome)
