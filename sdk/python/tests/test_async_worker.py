"""(f) The asyncio worker runs a job, and a retryable failure succeeds on
the next attempt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from receipt_worker import AsyncWorker, Attempt, Client, Retryable

from support import ApiServer, InThread

KIND = "async-export"


def test_the_async_worker_runs_jobs_and_retries_a_retryable_failure(
    start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(KIND, params_schema={"type": "object"}, timeout_secs=60, max_attempts=3)

    async def export(attempt: Attempt) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        attempt.progress(0.5)
        if attempt.params.get("flaky") and attempt.attempt == 1:
            raise Retryable("the sales database timed out", error_type="db_timeout")
        return {"attempt": attempt.attempt}

    worker = AsyncWorker(api.url, work_key, name="async-1", concurrency=2)
    worker.add_kind(KIND, export)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    plain = client.submit(KIND, {})["job_id"]
    flaky = client.submit(KIND, {"flaky": True})["job_id"]

    job = client.wait(plain, timeout=30)
    assert job["status"] == "SUCCEEDED" and job["attempts"] == 1, job
    assert client.result(plain) == {"attempt": 1}

    job = client.wait(flaky, timeout=30)
    assert job["status"] == "SUCCEEDED", job
    assert job["attempts"] == 2, job
    assert job["error"] is None
    assert client.result(flaky) == {"attempt": 2}
