"""(c) The complete's answer is lost between worker and api: the SDK sends
the same complete again, and Receipt answers it as the first, so there is
one result, one attempt and one webhook delivery."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest

from receipt_worker import Attempt, Client, Stream, Worker

from support import (
    ApiServer,
    DropFirstCompleteAnswer,
    InThread,
    WebhookReceiver,
    body_of,
    stays_true,
    wait_until,
)

KIND = "lossy-export"


@pytest.mark.parametrize("result", ["json", "stream"])
def test_a_complete_whose_answer_is_lost_is_sent_again_and_counted_once(
    result: str, start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    client.register_kind(
        KIND,
        params_schema={"type": "object"},
        timeout_secs=60,
        max_attempts=3,
        result_media_types=["application/json", "text/csv"],
    )

    receiver = WebhookReceiver().start()
    cleanup.callback(receiver.stop)
    webhook = client.register_webhook(receiver.url, events=["job.succeeded"])

    proxy = DropFirstCompleteAnswer(api.port).start()
    cleanup.callback(proxy.stop)

    def export(attempt: Attempt) -> Any:
        if result == "stream":
            # Sent as it is produced, chunked; kept for the retry.
            return Stream((f"{attempt.params['month']},{n}\n" for n in range(3)), "text/csv")
        return {"month": attempt.params["month"], "rows": 3}

    expected: Any = (
        b"2026-10,0\n2026-10,1\n2026-10,2\n"
        if result == "stream"
        else {"month": "2026-10", "rows": 3}
    )

    worker = Worker(proxy.url, work_key, name="behind-a-proxy", concurrency=2)
    worker.add_kind(KIND, export)
    runner = InThread(worker).start()
    cleanup.callback(runner.stop)

    job_id = client.submit(KIND, {"month": "2026-10"})["job_id"]
    job = client.wait(job_id, timeout=30)
    assert job["status"] == "SUCCEEDED", job
    # The SDK tried again after the lost answer, and got the first answer.
    wait_until("the complete to be sent again", lambda: proxy.completes_answered, timeout=20)
    assert len(proxy.dropped) == 1
    ((lost_request, lost_answer),) = proxy.dropped
    ((again_request, again_answer),) = proxy.completes_answered
    assert lost_answer.startswith(b"HTTP/1.1 200"), lost_answer
    assert again_answer.startswith(b"HTTP/1.1 200"), again_answer
    assert body_of(lost_request) == body_of(again_request)  # the same body
    if result == "stream":
        assert b"transfer-encoding: chunked" in lost_request.lower()
    answered = json.loads(body_of(again_answer))
    if result == "json":
        # A JSON result goes in a batch of reports: its answer is the batch's.
        assert lost_request.startswith(b"POST /v1/work/reports "), lost_request
        (answer,) = answered["reports"]
        assert answer["status"] == 200, answer
        answered = answer["body"]
    assert answered == {"job_id": job_id, "status": "SUCCEEDED"}

    job = client.job(job_id)
    assert job["attempts"] == 1, job
    assert client.result(job_id) == expected
    assert len(client.jobs(kind=KIND)["data"]) == 1

    wait_until("the job.succeeded delivery", lambda: receiver.of_type("job.succeeded"))
    # Receipt makes the event with the job's final status, so a second one
    # would exist by now; give its sender a moment to send it, were it there.
    wait_until(
        "the delivery to be logged",
        lambda: client.webhook_deliveries(webhook["id"])["data"],
    )
    stays_true(
        "a single job.succeeded delivery", lambda: len(receiver.of_type("job.succeeded")) == 1, 1.0
    )
    deliveries = receiver.of_type("job.succeeded")
    assert len(deliveries) == 1, deliveries
    assert deliveries[0].body["data"]["job_id"] == job_id
    logged = client.webhook_deliveries(webhook["id"])["data"]
    assert len({d["event_id"] for d in logged}) == 1, logged
