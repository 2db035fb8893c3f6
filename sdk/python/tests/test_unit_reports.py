"""The batches of reports of the sync worker, against a stand-in for the
call: a thread leads the batches only until its own report is answered,
and a waiting thread takes over."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from receipt_worker._reports import SyncReporter, report_item
from receipt_worker.attempt import Attempt

from fake import rfc3339


def attempt(job: str) -> Attempt:
    item = {
        "token": f"{job}.1",
        "job_id": job,
        "kind": "export",
        "attempt": 1,
        "max_attempts": 5,
        "params": {},
        "priority": "normal",
        "lease_expires_at": rfc3339(30),
        "deadline": rfc3339(60),
    }
    return Attempt.from_lease(item, time.monotonic())


class Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.status_code = 200
        self._body = body

    def json(self) -> Any:
        return self._body


class HeldCalls:
    """Answers each batch with a 200 per report; the first call waits until
    released. Records which thread sent each batch, and its tokens."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.first_sent = threading.Event()
        self.sent: list[tuple[str, list[str]]] = []

    def send(self, method: str, path: str, *, body: Any) -> Answer:
        tokens = [r["token"] for r in json.loads(body.data)["reports"]]
        self.sent.append((threading.current_thread().name, tokens))
        if len(self.sent) == 1:
            self.first_sent.set()
            assert self.release.wait(5)
        return Answer({"reports": [{"token": t, "status": 200, "body": {}} for t in tokens]})


def test_a_thread_leads_the_batches_only_until_its_own_report_is_answered() -> None:
    calls = HeldCalls()
    reporter = SyncReporter(calls)  # type: ignore[arg-type]
    answered: dict[str, float] = {}

    def report(job: str) -> None:
        one = attempt(job)
        answer = reporter.report(one, report_item(one, "cancelled", None))
        assert answer.status == 200
        answered[job] = time.monotonic()

    first = threading.Thread(target=report, args=("job_a",), name="a")
    first.start()
    assert calls.first_sent.wait(5)
    others = [threading.Thread(target=report, args=(job,), name=job) for job in ("b", "c")]
    for thread in others:
        thread.start()
    # Both wait behind the first call, then go together in the next.
    deadline = time.monotonic() + 5
    while len(reporter._pending) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    calls.release.set()
    first.join(5)
    for thread in others:
        thread.join(5)
    assert set(answered) == {"job_a", "b", "c"}
    assert calls.sent[0] == ("a", ["job_a.1"])
    (second,) = calls.sent[1:]
    assert second[0] in ("b", "c"), "the first thread went on leading after its answer"
    assert sorted(second[1]) == ["b.1", "c.1"]
