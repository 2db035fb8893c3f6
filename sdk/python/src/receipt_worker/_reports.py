"""Reports sent together: ``POST /v1/work/reports`` carries the reports of
several attempts, each applied and answered as its own call would be. A
report waits while another batch is on its way and goes with the next,
so a busy worker sends one call for many attempts and an idle one sends
each at once. A result too big for a batch, or a streamed one, goes
alone; so does every report of a batch the whole call refused (an api
without the route, say)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._http import AsyncSender, BytesBody, SyncSender, dumps
from .attempt import Attempt
from .errors import ApiError, ConnectionFailed

log = logging.getLogger("receipt_worker")

MOST_REPORTS = 100  # reports one call may carry
# A batch's body stays under Receipt's 1 MiB; a JSON result over this goes
# alone, through the attempt's own complete.
MOST_BATCH_BYTES = 960 * 1024
MOST_RESULT_IN_BATCH = 64 * 1024


class JsonDocument(BytesBody):
    """A JSON result the SDK serialized itself (valid JSON, so it can be
    embedded in a batch as it is)."""


@dataclass(frozen=True)
class ReportAnswer:
    """What a report's own call would have answered."""

    status: int
    body: Any


# A report the batch call did not take: it goes alone.
ALONE = ReportAnswer(0, None)


def report_item(attempt: Attempt, what: str, payload: bytes | dict[str, Any] | None) -> bytes:
    """One report of a batch, as JSON: ``payload`` is a complete's result
    (JSON bytes) or a fail's body."""
    head: dict[str, Any] = {"outcome": what, "token": attempt.token}
    traceparent = attempt._report_traceparent or attempt.traceparent
    if traceparent:
        head["traceparent"] = traceparent
    if what == "complete":
        assert isinstance(payload, bytes)
        return dumps(head)[:-1] + b',"result":' + payload + b"}"
    if what == "fail":
        assert isinstance(payload, dict)
        head.update(payload)
    return dumps(head)


def fits_batch(body: object) -> bool:
    return isinstance(body, JsonDocument) and len(body.data) <= MOST_RESULT_IN_BATCH


@dataclass
class _Pending:
    attempt: Attempt
    item: bytes
    settle: Callable[[ReportAnswer | BaseException], None]


def _settler(
    future: asyncio.Future[ReportAnswer] | concurrent.futures.Future[ReportAnswer],
) -> Callable[[ReportAnswer | BaseException], None]:
    """Settles ``future`` with a report's answer, or the error that kept
    its batch from being answered."""

    def settle(answer: ReportAnswer | BaseException) -> None:
        if future.done():
            return
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)

    return settle


def _take(pending: list[_Pending]) -> list[_Pending]:
    """The next batch: up to MOST_REPORTS, within MOST_BATCH_BYTES."""
    size = 0
    count = 0
    for entry in pending:
        if count == MOST_REPORTS or (count and size + len(entry.item) > MOST_BATCH_BYTES):
            break
        size += len(entry.item) + 1
        count += 1
    batch = pending[:count]
    del pending[:count]
    return batch


def _body(batch: list[_Pending]) -> BytesBody:
    return BytesBody(b'{"reports":[' + b",".join(entry.item for entry in batch) + b"]}")


def _settle(batch: list[_Pending], status: int, answer: Any) -> None:
    """Hands each report its own answer; each report of a batch the call
    refused as a whole goes alone."""
    answers = answer.get("reports") if status == 200 and isinstance(answer, dict) else None
    if not isinstance(answers, list) or len(answers) != len(batch):
        if status != 200:
            log.debug("the reports' call was refused with %d; sending each alone", status)
        for entry in batch:
            entry.settle(ALONE)
        return
    for entry, one in zip(batch, answers, strict=True):
        if isinstance(one, dict) and one.get("token") == entry.attempt.token:
            entry.settle(ReportAnswer(int(one.get("status", 0)), one.get("body")))
        else:
            entry.settle(ALONE)


class AsyncReporter:
    """The asyncio worker's batches: one call on its way at a time."""

    def __init__(self, sender: AsyncSender) -> None:
        self._sender = sender
        self._pending: list[_Pending] = []
        self._flushing: asyncio.Task[None] | None = None

    async def report(self, attempt: Attempt, item: bytes) -> ReportAnswer:
        future: asyncio.Future[ReportAnswer] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(attempt, item, _settler(future)))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            batch = _take(self._pending)
            try:
                response = await self._sender.send("POST", "/v1/work/reports", body=_body(batch))
                status = response.status_code
                answer = response.json() if status == 200 else None
            except (ApiError, ConnectionFailed) as e:
                for entry in batch:
                    entry.settle(e)
                continue
            except (ValueError, asyncio.CancelledError) as e:
                for entry in batch:
                    entry.settle(ALONE if isinstance(e, ValueError) else e)
                if isinstance(e, asyncio.CancelledError):
                    raise
                continue
            _settle(batch, status, answer)


class SyncReporter:
    """The sync worker's batches: a thread whose report waits, and finds no
    call on its way, sends the next batch itself; it stops leading once its
    own report is answered, and another waiting thread takes over."""

    def __init__(self, sender: SyncSender) -> None:
        self._sender = sender
        self._changed = threading.Condition()
        self._pending: list[_Pending] = []
        self._flushing = False

    def report(self, attempt: Attempt, item: bytes) -> ReportAnswer:
        future: concurrent.futures.Future[ReportAnswer] = concurrent.futures.Future()
        with self._changed:
            self._pending.append(_Pending(attempt, item, _settler(future)))
            while not future.done():
                if self._flushing or not self._pending:
                    self._changed.wait()
                    continue
                self._flushing = True
                batch = _take(self._pending)
                self._changed.release()
                try:
                    self._send(batch)
                finally:
                    self._changed.acquire()
                    self._flushing = False
                    self._changed.notify_all()
        return future.result()

    def _send(self, batch: list[_Pending]) -> None:
        try:
            response = self._sender.send("POST", "/v1/work/reports", body=_body(batch))
            status = response.status_code
            answer = response.json() if status == 200 else None
        except (ApiError, ConnectionFailed) as e:
            for entry in batch:
                entry.settle(e)
            return
        except BaseException as e:  # noqa: BLE001 - every waiting report hears of it
            for entry in batch:
                entry.settle(ALONE if isinstance(e, ValueError) else e)
            if not isinstance(e, ValueError):
                raise
            return
        _settle(batch, status, answer)
