"""Retries, bodies and outcomes, without a server."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import httpx
import pytest

from receipt_worker import ApiError, Client, ConnectionFailed, Permanent, Result, Retryable, Stream
from receipt_worker._common import error_type_of, failure_of
from receipt_worker._http import (
    RetryPolicy,
    SyncSender,
    parse_retry_after,
    parse_time,
)
from receipt_worker.results import InvalidResult, SourceFailed, StreamBody, body_of


def test_backoff_doubles_with_equal_jitter_up_to_its_ceiling() -> None:
    policy = RetryPolicy(first_backoff=0.1, max_backoff=1.0)
    for tries, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)]:
        for _ in range(50):
            pause = policy.backoff(tries)
            assert ceiling / 2 <= pause <= ceiling
    assert policy.backoff(1, retry_after=3.0) == 3.0


def test_retry_after_is_seconds_or_a_date() -> None:
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    when = email.utils.format_datetime(
        datetime.fromtimestamp(1_000_010, tz=timezone.utc), usegmt=True
    )
    assert parse_retry_after(when, now=1_000_000) == pytest.approx(10.0)


def test_receipts_times_parse_with_their_z() -> None:
    when = parse_time("2026-10-03T09:15:00.123Z")
    assert when.tzinfo is not None and when.microsecond == 123000


def sender_with(transport: httpx.MockTransport, policy: RetryPolicy | None = None) -> SyncSender:
    client = httpx.Client(base_url="http://receipt.test", transport=transport)
    return SyncSender(client, "rk_test", policy or RetryPolicy(first_backoff=0.01))


def test_a_call_is_tried_again_with_the_same_body_after_errors_and_5xx() -> None:
    seen: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.read())
        if len(seen) == 1:
            raise httpx.ConnectError("refused")
        if len(seen) == 2:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if len(seen) == 3:
            return httpx.Response(503, headers={"retry-after": "0"}, json={"status": 503})
        if len(seen) == 4:
            return httpx.Response(429, headers={"retry-after": "0"}, json={"status": 429})
        return httpx.Response(200, json={"ok": True})

    sender = sender_with(httpx.MockTransport(handle))
    pauses: list[float] = []
    response = sender.send("POST", "/x", json_body={"a": [1, 2]}, pause=pauses.append)
    assert response.status_code == 200
    assert seen == [b'{"a":[1,2]}'] * 5
    assert len(pauses) == 4


def test_a_409_is_answered_at_once_and_retry_after_is_honoured() -> None:
    tries = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal tries
        tries += 1
        if tries == 1:
            return httpx.Response(503, headers={"retry-after": "2"}, json={"status": 503})
        return httpx.Response(409, json={"type": "/problems/attempt-superseded", "status": 409})

    sender = sender_with(httpx.MockTransport(handle))
    pauses: list[float] = []
    response = sender.send("POST", "/x", json_body={}, pause=pauses.append)
    assert response.status_code == 409 and tries == 2
    assert pauses == [2.0]


def test_tries_stop_at_the_deadline_with_the_last_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    sender = sender_with(httpx.MockTransport(refuse), RetryPolicy(0.01, 0.02, deadline=0.2))
    started = time.monotonic()
    with pytest.raises(ConnectionFailed):
        sender.send("GET", "/x")
    assert time.monotonic() - started < 2

    def unavailable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"type": "/problems/internal-error", "status": 500})

    sender = sender_with(httpx.MockTransport(unavailable), RetryPolicy(0.01, 0.02, 0.1))
    with pytest.raises(ApiError) as error:
        sender.send("GET", "/x")
    assert error.value.status == 500 and error.value.type == "/problems/internal-error"


def test_a_streamed_body_is_sent_again_whole_after_a_cut() -> None:
    pieces: list[bytes | str] = [b"a,b\n", "1,2\n", b"3,4\n"]
    body = StreamBody(Stream(iter(pieces), "text/csv"))
    first = body.for_try(1)
    assert next(first) == b"a,b\n"  # the connection is cut here
    assert b"".join(body.for_try(2)) == b"a,b\n1,2\n3,4\n"
    assert b"".join(body.for_try(3)) == b"a,b\n1,2\n3,4\n"
    body.close()


def test_a_streams_failure_is_the_handlers() -> None:
    def rows() -> Iterator[bytes]:
        yield b"a\n"
        raise Permanent("the export broke", error_type="broken")

    body = StreamBody(Stream(rows(), "text/csv"))
    with pytest.raises(SourceFailed) as failed:
        list(body.for_try(1))
    failure = failure_of(failed.value)
    assert (failure.retryable, failure.error_type) == (False, "broken")


def test_outcomes_map_to_failures() -> None:
    assert failure_of(Retryable("slow", error_type="db_timeout")).body() == {
        "retryable": True,
        "error_type": "db_timeout",
        "message": "slow",
    }
    assert failure_of(Permanent("no")).retryable is False
    assert failure_of(Permanent("no")).error_type == "error"
    unexpected = failure_of(KeyError("month"))
    assert (unexpected.retryable, unexpected.error_type) == (True, "KeyError")
    assert failure_of(ValueError("x" * 5000)).message.endswith("…")
    assert len(failure_of(ValueError("x" * 5000)).message) == 4096
    assert error_type_of("my error/type") == "my_error_type"
    assert error_type_of("") == "error"
    assert failure_of(InvalidResult("bytes")).retryable is False


def test_results_become_bodies() -> None:
    assert body_of({"rows": 3}).for_try(1) == b'{"rows":3}'
    assert body_of([1, "é"]).for_try(1) == '[1,"é"]'.encode()
    csv = body_of(Result("a,b\n", "text/csv"))
    assert (csv.content_type, csv.for_try(1)) == ("text/csv", b"a,b\n")
    with pytest.raises(InvalidResult):
        body_of(b"raw bytes need a media type")
    with pytest.raises(InvalidResult):
        body_of({"when": object()})
    with pytest.raises(ValueError):
        Result(b"x", "csv")
    with pytest.raises(TypeError):
        Stream(b"not an iterable of pieces", "text/csv")  # type: ignore[arg-type]


def test_a_submit_sends_one_idempotency_key_on_all_its_tries() -> None:
    keys: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers.get("idempotency-key"))
        if len(keys) == 1:
            return httpx.Response(503, headers={"retry-after": "0"}, json={"status": 503})
        if len(keys) == 2:
            # The key's first request is still running.
            return httpx.Response(409, headers={"retry-after": "0"}, json={"status": 409})
        return httpx.Response(202, json={"job_id": "job_1", "status": "QUEUED"})

    with Client(
        "http://receipt.test",
        "rk_x",
        transport=httpx.MockTransport(handle),
        retry=RetryPolicy(0.01, 0.02),
    ) as client:
        assert client.submit("sales-export", {"month": "2026-10"})["job_id"] == "job_1"
    assert len(keys) == 3 and keys[0] and keys.count(keys[0]) == 3


def test_a_refusal_is_an_api_error_with_its_problem() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422,
            headers={"content-type": "application/problem+json"},
            json={
                "type": "/problems/validation-error",
                "title": "Unprocessable Entity",
                "status": 422,
                "detail": "month: does not match",
                "errors": [{"field": "month", "message": "does not match"}],
            },
        )

    with Client("http://receipt.test", "rk_x", transport=httpx.MockTransport(handle)) as client:
        with pytest.raises(ApiError) as refused:
            client.submit("sales-export", {"month": "October"})
    assert refused.value.problem.fields == ["month"]
    assert refused.value.detail == "month: does not match"
