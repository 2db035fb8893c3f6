"""(b) A worker killed mid-job: its lease lapses, another worker runs the
job's next attempt, and the first attempt's late complete is fenced."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from receipt_worker import Attempt, Client, Worker

from support import HERE, ApiServer, InThread, kill_if_running, start_script, wait_until

KIND = "crashy-export"


def test_a_killed_workers_attempt_is_taken_over_and_its_late_complete_changes_nothing(
    start_api: Callable[..., ApiServer], tmp_path: Path, cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(KIND, params_schema={"type": "object"}, timeout_secs=60, max_attempts=3)
    job_id = client.submit(KIND, {"month": "2026-10"})["job_id"]

    token_file = tmp_path / "token"
    doomed = start_script(
        HERE / "scripts" / "blocking_worker.py",
        {
            "RECEIPT_URL": api.url,
            "RECEIPT_WORKER_KEY": work_key,
            "KIND": KIND,
            "TOKEN_FILE": str(token_file),
        },
        tmp_path / "doomed.log",
    )
    cleanup.callback(kill_if_running, doomed)
    wait_until("the handler to write its token", token_file.exists, timeout=30)
    first_token = token_file.read_text()
    # Its first heartbeat took the lease up (and carried its progress): the
    # attempt counts, killed or not.
    running = wait_until(
        "the first heartbeat",
        lambda: (j := client.job(job_id))["progress"] == 0.25 and j,
        timeout=30,
    )
    assert running["status"] == "RUNNING" and running["attempts"] == 1, running

    doomed.kill()  # SIGKILL, mid-job
    assert doomed.wait(timeout=10) == -9

    def second(attempt: Attempt) -> dict[str, Any]:
        return {"by": "second", "attempt": attempt.attempt}

    worker = Worker(api.url, work_key, name="survivor", concurrency=1)
    worker.add_kind(KIND, second)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    job = wait_until(
        "the job to succeed on its next attempt",
        lambda: (j := client.job(job_id, wait=5))["status"] == "SUCCEEDED" and j,
        timeout=30,
    )
    assert job["attempts"] == 2, job
    assert client.result(job_id) == {"by": "second", "attempt": 2}

    # The first attempt's complete arrives late, with its token.
    late = httpx.post(
        f"{api.url}/v1/work/attempts/{first_token}/complete",
        headers={"Authorization": f"Bearer {work_key}"},
        json={"by": "first", "attempt": 1},
    )
    assert late.status_code == 409, late.text
    assert late.headers["content-type"].startswith("application/problem+json")
    assert late.json()["type"] == "/problems/attempt-superseded", late.text

    after = client.job(job_id)
    assert after["status"] == "SUCCEEDED" and after["attempts"] == 2
    assert after["finished_at"] == job["finished_at"]
    assert client.result(job_id) == {"by": "second", "attempt": 2}
    assert len(client.jobs(kind=KIND)["data"]) == 1
