"""(d) A cancel reaches a running handler within one heartbeat interval,
and the job ends CANCELLED; the asyncio worker's handler is cancelled as
a task."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

import pytest

from receipt_worker import AsyncWorker, Attempt, Client, Worker

from support import ApiServer, InThread, wait_until

KIND = "long-export"
JOB_LEASE = 2.0
HEARTBEAT_INTERVAL = JOB_LEASE / 3  # the SDK's: a third of what is left of the lease
SLACK = 1.0  # a heartbeat's round trip, and a loaded 2-core machine


def test_a_cancel_reaches_a_running_sync_handler_within_a_heartbeat(
    start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(KIND, params_schema={"type": "object"}, timeout_secs=60)

    started = threading.Event()
    seen: list[float] = []
    reasons: list[str | None] = []

    def long_export(attempt: Attempt) -> dict[str, bool]:
        started.set()
        while not attempt.cancelled:
            time.sleep(0.01)
        seen.append(time.monotonic())
        reasons.append(attempt.stop_reason)
        attempt.check_cancel()  # raises Cancelled
        return {"finished": True}

    worker = Worker(api.url, work_key, name="cancellable", concurrency=1)
    worker.add_kind(KIND, long_export)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    job_id = client.submit(KIND, {})["job_id"]
    wait_until("the handler to start", started.is_set)
    wait_until("the job to run", lambda: client.job(job_id)["status"] == "RUNNING")

    asked = time.monotonic()
    cancelled = client.cancel(job_id)
    assert cancelled["cancel_requested"] is True, cancelled
    wait_until("the handler to see the cancel", lambda: seen, timeout=10)
    took = seen[0] - asked
    assert took <= HEARTBEAT_INTERVAL + SLACK, f"the cancel took {took:.2f}s to reach the handler"
    assert reasons == ["cancel_requested"]

    job = client.wait(job_id, timeout=20)
    assert job["status"] == "CANCELLED", job
    assert job["attempts"] == 1 and job["result_url"] is None


def test_a_cancel_cancels_an_async_handlers_task(
    start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(KIND, params_schema={"type": "object"}, timeout_secs=60)

    started = threading.Event()
    seen: list[float] = []

    async def long_export(attempt: Attempt) -> dict[str, bool]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(time.monotonic())
            raise
        return {"finished": True}

    worker = AsyncWorker(api.url, work_key, name="cancellable-async", concurrency=1)
    worker.add_kind(KIND, long_export)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    job_id = client.submit(KIND, {})["job_id"]
    wait_until("the handler to start", started.is_set)
    asked = time.monotonic()
    client.cancel(job_id)
    wait_until("the handler's task to be cancelled", lambda: seen, timeout=10)
    assert seen[0] - asked <= HEARTBEAT_INTERVAL + SLACK
    job = client.wait(job_id, timeout=20)
    assert job["status"] == "CANCELLED", job


def test_a_handler_past_its_deadline_is_stopped_and_its_job_tried_again(
    start_api: Callable[..., ApiServer], cleanup: ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="receipt_worker")
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(
        "slow-export", params_schema={"type": "object"}, timeout_secs=2, max_attempts=2
    )
    reasons: list[str | None] = []

    def slow_export(attempt: Attempt) -> dict[str, int]:
        if attempt.attempt == 1:
            attempt.wait_cancelled(30)  # far past the kind's 2 s
            reasons.append(attempt.stop_reason)
            return {"attempt": 1}  # too late: not reported
        return {"attempt": attempt.attempt}

    worker = Worker(api.url, work_key, name="slowpoke", concurrency=2)
    worker.add_kind("slow-export", slow_export)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    job_id = client.submit("slow-export", {})["job_id"]
    job = client.wait(job_id, timeout=30)
    assert job["status"] == "SUCCEEDED" and job["attempts"] == 2, job
    assert client.result(job_id) == {"attempt": 2}
    assert reasons == ["timeout"]
    # The SDK's timeout report arrived before the deadline, and was taken.
    logged = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert f"job {job_id} attempt 1: fail reported" in logged, logged
    assert not [m for m in logged if "refused" in m], logged
