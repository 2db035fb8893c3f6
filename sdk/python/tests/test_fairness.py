"""(e) Caps and fairness with external workers: MAX_RUNNING_PER_TENANT=2
holds over many workers, and two tenants' backlogs both progress."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from receipt_worker import Attempt, Client, Worker

from support import ApiServer, InThread, wait_until

KIND = "batch-export"  # the same name in both tenants
JOBS = 12
WORKERS_PER_TENANT = 3
CAP = 2


def test_each_tenant_runs_at_most_its_cap_and_both_progress(
    start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api(MAX_RUNNING_PER_TENANT=CAP)
    full_keys = {"default": api.key, "other": api.create_key(tenant="other")}
    work_keys = {t: api.create_key(tenant=t, scope="work") for t in full_keys}
    clients = {t: Client(api.url, key) for t, key in full_keys.items()}
    for c in clients.values():
        cleanup.callback(c.close)

    lock = threading.Lock()
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    starts: dict[str, list[float]] = defaultdict(list)
    ends: dict[str, list[float]] = defaultdict(list)

    def handler_of(tenant: str) -> Callable[[Attempt], Any]:
        def export(attempt: Attempt) -> dict[str, Any]:
            with lock:
                running[tenant] += 1
                peak[tenant] = max(peak[tenant], running[tenant])
                starts[tenant].append(time.monotonic())
            try:
                time.sleep(0.1)
            finally:
                with lock:
                    running[tenant] -= 1
                    ends[tenant].append(time.monotonic())
            return {"tenant": tenant, "n": attempt.params["n"]}

        return export

    job_ids: dict[str, list[str]] = {}
    for tenant, c in clients.items():
        c.register_kind(KIND, params_schema={"type": "object"}, timeout_secs=60)
        job_ids[tenant] = [
            c.submit(KIND, {"n": n}, idempotency_key=f"{tenant}-{n}")["job_id"] for n in range(JOBS)
        ]

    for tenant in clients:
        for i in range(WORKERS_PER_TENANT):
            worker = Worker(api.url, work_keys[tenant], name=f"{tenant}-{i}", concurrency=2)
            worker.add_kind(KIND, handler_of(tenant))
            runner = InThread(worker).start()
            cleanup.callback(runner.stop)

    def all_succeeded() -> bool:
        return all(
            len(c.jobs(kind=KIND, status="SUCCEEDED", limit=200)["data"]) == JOBS
            for c in clients.values()
        )

    wait_until("every job of both tenants to succeed", all_succeeded, timeout=60, interval=0.2)

    for tenant, c in clients.items():
        jobs = c.jobs(kind=KIND, limit=200)["data"]
        assert sorted(j["job_id"] for j in jobs) == sorted(job_ids[tenant])
        assert all(j["status"] == "SUCCEEDED" and j["attempts"] == 1 for j in jobs), jobs
        assert len(starts[tenant]) == JOBS
    # The cap held over the three workers (six slots) of each tenant...
    assert peak["default"] <= CAP and peak["other"] <= CAP, dict(peak)
    # ...and was reached, so that it was the cap that held them.
    assert peak["default"] == CAP and peak["other"] == CAP, dict(peak)
    # Both progressed: neither finished its backlog before the other began.
    assert min(starts["other"]) < max(ends["default"])
    assert min(starts["default"]) < max(ends["other"])
