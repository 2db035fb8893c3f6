"""With OpenTelemetry installed, an attempt's span continues the trace of
the lease's traceparent; without it, nothing happens."""

from __future__ import annotations

import pytest

from receipt_worker import Attempt, Worker, _tracing

from fake import FakeReceipt
from support import InThread, wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def test_an_attempt_runs_in_a_span_continuing_the_leases_trace() -> None:
    otel = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    fake = FakeReceipt()
    token = fake.add({}, traceparent=f"00-{TRACE_ID}-{PARENT}-01")
    inside: list[str] = []

    def export(attempt: Attempt) -> dict[str, bool]:
        context = trace.get_current_span().get_span_context()
        inside.append(format(context.trace_id, "032x"))
        return {"ok": True}

    worker = Worker("http://receipt.test", "rk", name="traced", transport=fake.transport())
    worker.add_kind("export", export)
    runner = InThread(worker).start()
    try:
        wait_until("the complete", lambda: fake.reports(token))
    finally:
        runner.stop()

    assert inside == [TRACE_ID]
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("receipt.attempt")]
    assert span.name == "receipt.attempt export"
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT
    assert span.attributes is not None and span.attributes["receipt.job_id"] == "job_0"
    # The reports name the attempt's span.
    (complete,) = fake.reports(token)
    assert complete.headers["traceparent"].startswith(f"00-{TRACE_ID}-")
    assert complete.headers["traceparent"] != f"00-{TRACE_ID}-{PARENT}-01"


def test_without_opentelemetry_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tracing, "_otel_trace", None)
    fake = FakeReceipt()
    token = fake.add({}, traceparent=f"00-{TRACE_ID}-{PARENT}-01")
    worker = Worker("http://receipt.test", "rk", name="untraced", transport=fake.transport())
    worker.add_kind("export", lambda attempt: {"ok": True})
    runner = InThread(worker).start()
    try:
        wait_until("the complete", lambda: fake.reports(token))
    finally:
        runner.stop()
    # The reports carry the lease's own traceparent, so Receipt's spans join it.
    assert fake.reports(token)[0].headers["traceparent"] == f"00-{TRACE_ID}-{PARENT}-01"
