"""The workers against a fake Receipt: how each end of a handler is
reported, what a heartbeat's 409 and the deadline do, and shutdown."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from receipt_worker import (
    AsyncWorker,
    Attempt,
    Cancelled,
    Permanent,
    Result,
    Retryable,
    RetryPolicy,
    Stream,
    Worker,
)

from fake import Call, FakeReceipt, SilentServer, problem
from support import HERE, InThread, wait_until

FAST = RetryPolicy(first_backoff=0.01, max_backoff=0.05, deadline=5.0)


def sync_worker(fake: FakeReceipt, **kwargs: Any) -> Worker:
    kwargs.setdefault("concurrency", 4)
    return Worker(
        "http://receipt.test",
        "rk_work",
        name="unit",
        retry=FAST,
        transport=fake.transport(),
        **kwargs,
    )


def async_worker(fake: FakeReceipt, **kwargs: Any) -> AsyncWorker:
    kwargs.setdefault("concurrency", 4)
    return AsyncWorker(
        "http://receipt.test",
        "rk_work",
        name="unit",
        retry=FAST,
        transport=fake.async_transport(),
        **kwargs,
    )


def flavoured(
    flavour: str,
    fake: FakeReceipt,
    handler: Callable[[Attempt], Any],
    async_handler: Callable[[Attempt], Awaitable[Any]],
    **kwargs: Any,
) -> Worker | AsyncWorker:
    """A worker of kind ``export``: the sync one running ``handler``, or
    the asyncio one running ``async_handler``."""
    if flavour == "sync":
        worker = sync_worker(fake, **kwargs)
        worker.add_kind("export", handler)
        return worker
    aworker = async_worker(fake, **kwargs)
    aworker.add_kind("export", async_handler)
    return aworker


def handler(attempt: Attempt) -> Any:
    how = attempt.params.get("how")
    if how == "retryable":
        raise Retryable("try later", error_type="db_timeout")
    if how == "permanent":
        raise Permanent("never", error_type="bad_month")
    if how == "boom":
        raise ZeroDivisionError("division by zero")
    if how == "csv":
        return Result("a,b\n1,2\n", "text/csv")
    if how == "stream":
        return Stream((f"{n}\n" for n in range(3)), "text/csv")
    if how == "bytes":
        return b"no media type"
    return {"ok": True, "attempt": attempt.attempt}


async def async_handler(attempt: Attempt) -> Any:
    await asyncio.sleep(0)
    return handler(attempt)


def async_handler_of(fn: Callable[[Attempt], Any]) -> Callable[[Attempt], Awaitable[Any]]:
    async def run(attempt: Attempt) -> Any:
        await asyncio.sleep(0)
        return fn(attempt)

    return run


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_each_end_of_a_handler_is_reported(flavour: str) -> None:
    fake = FakeReceipt()
    tokens = {
        how: fake.add({"how": how}, job=f"job_{how}")
        for how in ["ok", "retryable", "permanent", "boom", "csv", "stream", "bytes"]
    }
    worker = flavoured(flavour, fake, handler, async_handler, concurrency=8)
    runner = InThread(worker).start()
    try:
        wait_until("every report", lambda: len(fake.reports()) == len(tokens))
    finally:
        runner.stop()

    def only(how: str) -> Call:
        (call,) = fake.reports(tokens[how])
        return call

    assert (only("ok").action, only("ok").json()) == ("complete", {"ok": True, "attempt": 1})
    assert only("ok").headers["content-type"] == "application/json"
    assert only("retryable").json() == {
        "retryable": True,
        "error_type": "db_timeout",
        "message": "try later",
    }
    assert only("permanent").json()["retryable"] is False
    assert only("boom").json() == {
        "retryable": True,
        "error_type": "ZeroDivisionError",
        "message": "division by zero",
    }
    assert (only("csv").headers["content-type"], only("csv").body) == ("text/csv", b"a,b\n1,2\n")
    assert (only("stream").headers["content-type"], only("stream").body) == (
        "text/csv",
        b"0\n1\n2\n",
    )
    assert only("bytes").action == "fail"
    assert only("bytes").json()["error_type"] == "invalid_result"
    lease = next(c for c in fake.calls if c.action == "lease")
    assert lease.json() == {"worker": "unit", "kinds": ["export"], "max": 8, "wait_secs": 30}
    assert lease.headers["authorization"] == "Bearer rk_work"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_heartbeats_come_three_times_a_lease_with_progress(flavour: str) -> None:
    fake = FakeReceipt(lease_secs=0.6)
    token = fake.add({})
    release = threading.Event()

    def slow(attempt: Attempt) -> dict[str, bool]:
        attempt.progress(0.25)
        release.wait(10)
        return {"ok": True}

    async def aslow(attempt: Attempt) -> dict[str, bool]:
        attempt.progress(0.25)
        while not release.is_set():
            await asyncio.sleep(0.01)
        return {"ok": True}

    worker = flavoured(flavour, fake, slow, aslow)
    runner = InThread(worker).start()
    try:
        started = time.monotonic()
        wait_until("six heartbeats", lambda: len(fake.beats(token)) >= 6, timeout=10)
        took = time.monotonic() - started
        # Six beats within about two leases of 0.6 s: three per lease.
        assert took < 1.6, took
        assert fake.beats(token)[-1].json() == {"progress": 0.25}
        release.set()
        wait_until("the complete", lambda: fake.reports(token))
    finally:
        release.set()
        runner.stop()


def test_a_cancel_request_reaches_a_sync_handler_which_reports_cancelled() -> None:
    fake = FakeReceipt(lease_secs=0.3)
    token = fake.add({})
    fake.hooks["heartbeat"] = lambda call: httpx.Response(
        200,
        json={
            "cancel_requested": True,
            "lease_expires_at": "2099-01-01T00:00:00.000Z",
            "deadline": "2099-01-01T00:00:00.000Z",
        },
    )
    reasons: list[str | None] = []

    def loop(attempt: Attempt) -> None:
        try:
            while True:
                attempt.sleep(0.01)
        except Cancelled as e:
            reasons.append(e.reason)
            raise

    worker = sync_worker(fake)
    worker.add_kind("export", loop)
    runner = InThread(worker).start()
    try:
        wait_until("the report", lambda: fake.reports(token))
    finally:
        runner.stop()
    assert [c.action for c in fake.reports(token)] == ["cancelled"]
    assert fake.reports(token)[0].body == b""
    assert reasons == ["cancel_requested"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_heartbeats_409_stops_the_handler_and_reports_nothing(flavour: str) -> None:
    fake = FakeReceipt(lease_secs=0.3)
    token = fake.add({})
    fake.hooks["heartbeat"] = lambda call: problem(409, "/problems/attempt-superseded")
    stopped = threading.Event()
    reasons: list[str | None] = []

    def loop(attempt: Attempt) -> dict[str, bool]:
        attempt.wait_cancelled(10)
        reasons.append(attempt.stop_reason)
        stopped.set()
        return {"finished": True}  # not reported: the attempt was lost

    async def aloop(attempt: Attempt) -> dict[str, bool]:
        try:
            await asyncio.sleep(10)
        finally:
            reasons.append(attempt.stop_reason)
            stopped.set()
        return {"finished": True}

    worker = flavoured(flavour, fake, loop, aloop)
    runner = InThread(worker).start()
    try:
        wait_until("the handler to stop", stopped.is_set)
        # Its slot frees, and the worker leases again.
        leases = len([c for c in fake.calls if c.action == "lease"])
        wait_until(
            "another lease", lambda: len([c for c in fake.calls if c.action == "lease"]) > leases
        )
    finally:
        runner.stop()
    assert fake.reports(token) == []
    assert len(fake.beats(token)) == 1
    assert reasons == ["lost"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_handler_past_its_deadline_is_stopped_and_reported_as_a_timeout(flavour: str) -> None:
    fake = FakeReceipt(lease_secs=0.5)
    deadline = time.monotonic() + 1.0
    token = fake.add({}, deadline_secs=1.0)
    reasons: list[str | None] = []

    def loop(attempt: Attempt) -> dict[str, bool]:
        attempt.wait_cancelled(10)
        reasons.append(attempt.stop_reason)
        return {"finished": True}  # too late: not reported

    async def aloop(attempt: Attempt) -> dict[str, bool]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            reasons.append(attempt.stop_reason)
            raise
        return {"finished": True}

    worker = flavoured(flavour, fake, loop, aloop)
    runner = InThread(worker).start()
    try:
        wait_until("the timeout's report", lambda: fake.reports(token), timeout=5)
        wait_until("the handler to stop", lambda: reasons)
    finally:
        runner.stop()
    (report,) = fake.reports(token)
    assert report.action == "fail"
    assert report.json()["retryable"] is True and report.json()["error_type"] == "timeout"
    assert report.at < deadline  # sent before the deadline, so that it is taken
    assert reasons == ["timeout"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_409_on_a_report_is_dropped_and_a_503_tried_again_with_the_same_body(
    flavour: str,
) -> None:
    fake = FakeReceipt(refuse_batches=True)  # each report alone, through its own call
    fenced = fake.add({"n": 1}, job="job_fenced")
    flaky = fake.add({"n": 2}, job="job_flaky")
    answered: dict[str, int] = {}

    def complete(call: Call) -> httpx.Response | None:
        answered[call.token] = answered.get(call.token, 0) + 1
        if call.token == fenced:
            return problem(409, "/problems/attempt-superseded")
        if answered[call.token] == 1:
            return problem(503, "/problems/service-unavailable", **{"retry-after": "0"})
        return None

    fake.hooks["complete"] = complete
    worker = flavoured(flavour, fake, lambda a: {"n": a.params["n"]}, async_handler)
    runner = InThread(worker).start()
    try:
        wait_until("both reports", lambda: answered.get(flaky, 0) == 2 and fenced in answered)
    finally:
        runner.stop()
    assert len(fake.reports(fenced)) == 1
    first, second = fake.reports(flaky)
    assert first.body == second.body


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_reports_go_together_each_answered_alone_and_a_503_sends_the_batch_again(
    flavour: str,
) -> None:
    fake = FakeReceipt()
    fenced = fake.add({"n": 1}, job="job_fenced")
    done = fake.add({"n": 2}, job="job_done")
    failed = fake.add({"n": 3}, job="job_failed")
    release = threading.Event()
    batches: list[int] = []

    def complete(call: Call) -> httpx.Response | None:
        if call.token == fenced:
            return problem(409, "/problems/attempt-superseded")
        return None

    def fail(call: Call) -> httpx.Response | None:
        # The first batch holding the failure meets an outage.
        batches.append(1)
        if len(batches) == 1:
            return problem(503, "/problems/service-unavailable", **{"retry-after": "0"})
        return None

    fake.hooks["complete"] = complete
    fake.hooks["fail"] = fail

    def handler(attempt: Attempt) -> Any:
        release.wait(5)  # all three end together, so they go in one batch
        if attempt.params["n"] == 3:
            raise Permanent("no such month", error_type="bad_month")
        return {"n": attempt.params["n"]}

    async def async_handler_(attempt: Attempt) -> Any:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 5)
        return handler(attempt)

    worker = flavoured(flavour, fake, handler, async_handler_)
    runner = InThread(worker).start()
    try:
        wait_until("three running", lambda: not fake.pending)
        release.set()
        wait_until("the failure taken", lambda: len(batches) == 2)
    finally:
        runner.stop()
    # Nothing went alone; the batch the outage met went again, the same.
    assert {c.action for c in fake.calls} <= {"lease", "complete", "fail", "heartbeat"}
    assert all(b'"outcome"' in body for body in fake.batches)
    bodies = [body for body in fake.batches if b"job_failed" in body]
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    # Each was answered on its own: the 409 dropped, sent again only with
    # the batch the outage met, if it was in that one.
    with_fenced = [body for body in fake.batches if b"job_fenced" in body]
    assert len(with_fenced) == 1 or with_fenced == bodies
    assert [c.json() for c in fake.reports(done)][-1] == {"n": 2}
    assert fake.reports(failed)[-1].json()["error_type"] == "bad_month"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_slot_is_free_while_its_report_is_on_its_way_up_to_twice_the_slots_held(
    flavour: str,
) -> None:
    fake = FakeReceipt()
    first = fake.add({"n": 1}, job="job_a")
    fake.add({"n": 2}, job="job_b")
    fake.add({"n": 3}, job="job_c")
    release = threading.Event()
    ran: list[int] = []
    refused_after_b: list[int] = []

    def complete(call: Call) -> httpx.Response | None:
        # The first attempt's report meets an outage until released.
        if call.token == first and not release.is_set():
            if 2 in ran:
                refused_after_b.append(1)
            return problem(503, "/problems/service-unavailable", **{"retry-after": "0"})
        return None

    fake.hooks["complete"] = complete

    def handler(attempt: Attempt) -> Any:
        ran.append(attempt.params["n"])
        return {"n": attempt.params["n"]}

    worker = flavoured(flavour, fake, handler, async_handler_of(handler), concurrency=1)
    runner = InThread(worker).start()
    try:
        # One slot: the second attempt runs while the first is reported.
        wait_until("the second attempt run", lambda: 2 in ran)
        # Two held (one reporting, one waiting to): no third lease, however
        # often the first report is tried meanwhile.
        wait_until("the first report refused twice more", lambda: len(refused_after_b) >= 2)
        assert ran == [1, 2]
        assert len([c for c in fake.calls if c.action == "lease"]) == 2
        release.set()
        wait_until("every report", lambda: len({c.token for c in fake.reports()}) == 3)
    finally:
        runner.stop()
    assert ran == [1, 2, 3]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_lease_asks_only_for_the_slots_no_handler_holds(flavour: str) -> None:
    fake = FakeReceipt()
    for n in range(4):
        fake.add({"n": n}, job=f"job_{n}")
    release = threading.Event()
    lock = threading.Lock()
    counts = {"leased": 0, "running": 0, "returned": 0, "most_running": 0}
    over: list[str] = []

    def lease(call: Call) -> httpx.Response | None:
        most = int(call.json().get("max", 1))
        with lock:
            holding = counts["leased"] - counts["returned"]
            if holding + most > 2:
                over.append(f"asked for {most} while handlers held {holding} of 2 slots")
        with fake.lock:
            if not fake.pending:
                return None  # the fake's own idle lease
            taken, fake.pending = fake.pending[:most], fake.pending[most:]
        with lock:
            counts["leased"] += len(taken)
        return httpx.Response(200, json={"attempts": taken})

    fake.hooks["lease"] = lease

    def started() -> None:
        with lock:
            counts["running"] += 1
            counts["most_running"] = max(counts["most_running"], counts["running"])

    def returning() -> None:
        with lock:
            counts["running"] -= 1
            counts["returned"] += 1

    def handler(attempt: Attempt) -> Any:
        started()
        release.wait()
        returning()
        return {"n": attempt.params["n"]}

    async def async_handler(attempt: Attempt) -> Any:
        started()
        while not release.is_set():
            await asyncio.sleep(0.005)
        returning()
        return {"n": attempt.params["n"]}

    worker = flavoured(flavour, fake, handler, async_handler, concurrency=2)
    runner = InThread(worker).start()
    try:
        wait_until("two handlers running", lambda: counts["running"] >= 2)
        release.set()
        wait_until("every report", lambda: len({c.token for c in fake.reports()}) == 4)
    finally:
        release.set()
        runner.stop()
    assert over == []
    assert counts["most_running"] == 2


def test_a_result_receipt_refuses_becomes_a_permanent_failure() -> None:
    fake = FakeReceipt()
    token = fake.add({})
    fake.hooks["complete"] = lambda call: problem(
        415, "/problems/unsupported-media-type", "a result of kind export is application/json"
    )
    worker = sync_worker(fake)
    worker.add_kind("export", lambda a: Result("x", "text/csv"))
    runner = InThread(worker).start()
    try:
        wait_until("the fail", lambda: len(fake.reports(token)) == 2)
    finally:
        runner.stop()
    complete, fail = fake.reports(token)
    assert fail.action == "fail"
    assert fail.json()["retryable"] is False and fail.json()["error_type"] == "result_rejected"
    assert "application/json" in fail.json()["message"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_stop_waits_for_running_handlers_and_reports_them(flavour: str) -> None:
    fake = FakeReceipt()
    token = fake.add({})
    started = threading.Event()

    def slow(attempt: Attempt) -> dict[str, bool]:
        started.set()
        time.sleep(0.4)
        return {"shutting_down": attempt.shutting_down}

    async def aslow(attempt: Attempt) -> dict[str, bool]:
        started.set()
        await asyncio.sleep(0.4)
        return {"shutting_down": attempt.shutting_down}

    worker = flavoured(flavour, fake, slow, aslow, shutdown_grace=5)
    runner = InThread(worker).start()
    wait_until("the handler to start", started.is_set)
    runner.stop()  # returns once the handler's outcome is reported
    (report,) = fake.reports(token)
    assert (report.action, report.json()) == ("complete", {"shutting_down": True})


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_handler_still_running_after_the_grace_is_not_reported(flavour: str) -> None:
    fake = FakeReceipt(lease_secs=0.3)
    token = fake.add({})
    started = threading.Event()
    reasons: list[str | None] = []

    def stuck(attempt: Attempt) -> dict[str, bool]:
        started.set()
        attempt.wait_cancelled(10)
        reasons.append(attempt.stop_reason)
        return {"finished": True}

    async def astuck(attempt: Attempt) -> dict[str, bool]:
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            reasons.append(attempt.stop_reason)
        return {"finished": True}

    worker = flavoured(flavour, fake, stuck, astuck, shutdown_grace=0.5)
    runner = InThread(worker).start()
    wait_until("the handler to start", started.is_set)
    stopped_at = time.monotonic()
    runner.stop()
    assert time.monotonic() - stopped_at < 2.5
    wait_until("the handler to see the shutdown", lambda: reasons)
    beats = len(fake.beats(token))
    time.sleep(0.4)  # the heartbeats have stopped: the lease lapses
    assert len(fake.beats(token)) == beats
    assert fake.reports(token) == []
    assert reasons == ["shutdown"]


def test_stop_cuts_off_a_lease_waiting_in_a_long_poll() -> None:
    silent = SilentServer()
    try:
        worker = Worker(silent.url, "rk_work", name="unit")
        worker.add_kind("export", handler)
        runner = InThread(worker).start()
        wait_until("the lease to be sent", lambda: silent.accepted)
        time.sleep(0.1)  # the lease is waiting for its answer
        stopped_at = time.monotonic()
        runner.stop(timeout=5)
        assert time.monotonic() - stopped_at < 1.0
    finally:
        silent.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_sigterm_stops_a_worker_waiting_in_a_long_poll(flavour: str, tmp_path: Path) -> None:
    silent = SilentServer()
    try:
        process = subprocess.Popen(
            [sys.executable, str(HERE / "scripts" / "silent_server_worker.py"), flavour],
            env={**os.environ, "RECEIPT_URL": silent.url},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert process.stdout is not None
            lines: Iterator[str] = iter(process.stdout.readline, "")
            assert "READY" in next(line for line in lines if "READY" in line or not line)
            wait_until("the lease to be sent", lambda: silent.accepted)
            time.sleep(0.1)
            stopped_at = time.monotonic()
            process.terminate()  # SIGTERM
            assert process.wait(timeout=10) == 0
            assert time.monotonic() - stopped_at < 2.0
            assert "EXITED" in process.stdout.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        silent.close()


def test_kinds_and_names_are_checked() -> None:
    worker = Worker("http://receipt.test", "rk_work", name="unit")
    with pytest.raises(ValueError):
        worker.add_kind("Bad Kind", handler)
    with pytest.raises(TypeError):
        worker.add_kind("export", async_handler)
    with pytest.raises(ValueError):
        Worker("http://receipt.test", "rk_work", name="no spaces")
    with pytest.raises(ValueError):
        worker.run()  # no kinds
    with pytest.raises(ValueError):
        Attempt.progress(
            Attempt.from_lease(
                {
                    "token": "job_1.1",
                    "job_id": "job_1",
                    "kind": "export",
                    "attempt": 1,
                    "max_attempts": 1,
                    "params": {},
                    "lease_expires_at": "2026-10-03T09:15:00.123Z",
                    "deadline": "2026-10-03T09:15:00.123Z",
                },
                0.0,
            ),
            1.5,
        )
