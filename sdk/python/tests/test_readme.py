"""(a) The README's example runs a job to SUCCEEDED, as written."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from receipt_worker import Client

from support import ApiServer, kill_if_running, readme_example, start_script, stop_process


def test_the_readme_example_runs_a_job_to_succeeded(
    start_api: Callable[..., ApiServer], tmp_path: Path, cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    worker_py = tmp_path / "worker.py"
    worker_py.write_text(readme_example("worker.py"))
    submit_py = tmp_path / "submit.py"
    submit_py.write_text(readme_example("submit.py"))
    assert len(readme_example("worker.py").strip().splitlines()) <= 12

    env = {"RECEIPT_URL": api.url, "RECEIPT_KEY": api.key, "RECEIPT_WORKER_KEY": work_key}
    submit = start_script(submit_py, env, tmp_path / "submit.log")
    cleanup.callback(kill_if_running, submit)
    worker = start_script(worker_py, env, tmp_path / "worker.log")
    cleanup.callback(kill_if_running, worker)

    assert submit.wait(timeout=60) == 0, (tmp_path / "submit.log").read_text()
    printed = (tmp_path / "submit.log").read_text()
    assert printed.strip() == "SUCCEEDED {'month': '2026-10', 'rows': 3}", printed

    with Client(api.url, api.key) as client:
        jobs = client.jobs(kind="sales-export")["data"]
        assert len(jobs) == 1
        assert jobs[0]["status"] == "SUCCEEDED" and jobs[0]["attempts"] == 1
        assert jobs[0]["progress"] == 1.0

    # SIGTERM: the worker stops leasing (its long poll is cut off at once)
    # and exits cleanly, well before the poll's 30 s.
    assert stop_process(worker, timeout=10) == 0, (tmp_path / "worker.log").read_text()
