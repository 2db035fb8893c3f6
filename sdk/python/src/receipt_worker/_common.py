"""What the sync and the asyncio worker share: settings, the kinds and
their handlers, how a handler's end becomes a report, and how a report's
answer is read."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from ._http import BytesBody, RetryPolicy, ServerClock, api_error
from ._reports import ReportAnswer, fits_batch, report_item
from .attempt import CANCEL_REQUESTED, REPORTING, Attempt
from .errors import Problem, Retryable
from .results import InvalidResult, SourceFailed

log = logging.getLogger("receipt_worker")

H = TypeVar("H", bound=Callable[..., Any])

MOST_LEASED = 100  # attempts one lease may take
MOST_KINDS = 32  # kinds one lease may name
LEASE_WAIT_SECS = 30  # the lease's long poll
MOST_MESSAGE_CHARS = 4096

_KIND_NAME = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")
_WORKER_NAME = re.compile(r"^[A-Za-z0-9._:@-]{1,64}$")
_ERROR_TYPE_CHAR = re.compile(r"[^A-Za-z0-9._-]")


def default_name() -> str:
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:40] or "worker"
    return f"{host}-{os.getpid()}"


def check_worker_name(name: str) -> str:
    if not _WORKER_NAME.match(name):
        raise ValueError(
            f"a worker's name is 1 to 64 letters, digits, '.', '_', '-', ':' or '@', not {name!r}"
        )
    return name


def check_kind_name(name: str) -> str:
    if not _KIND_NAME.match(name):
        raise ValueError(
            f"a kind's name is 1 to 64 lowercase letters, digits, '-', '_' or '.', starting "
            f"with a letter, not {name!r}"
        )
    return name


def error_type_of(name: str) -> str:
    """A name fit for ``error_type``: 1 to 64 letters, digits, ``.``, ``_``
    or ``-``."""
    cleaned = _ERROR_TYPE_CHAR.sub("_", name)[:64]
    return cleaned or "error"


def message_of(text: str) -> str:
    return text if len(text) <= MOST_MESSAGE_CHARS else text[: MOST_MESSAGE_CHARS - 1] + "…"


@dataclass(frozen=True)
class Failure:
    retryable: bool
    error_type: str
    message: str

    def body(self) -> dict[str, Any]:
        return {"retryable": self.retryable, "error_type": self.error_type, "message": self.message}


def failure_of(error: BaseException) -> Failure:
    """How an exception from a handler (or from its result's stream) is
    reported: :class:`Retryable` and :class:`Permanent` as they say; a
    result that cannot be sent permanently; anything else retryable, with
    the exception's class name as ``error_type``."""
    if isinstance(error, SourceFailed):
        error = error.error
    if isinstance(error, Retryable):
        return Failure(error.retryable, error_type_of(error.error_type), message_of(error.message))
    if isinstance(error, InvalidResult):
        return Failure(False, "invalid_result", message_of(str(error)))
    text = str(error) or repr(error)
    return Failure(True, error_type_of(type(error).__name__), message_of(text))


def log_failure(attempt: Attempt, error: BaseException, failure: Failure) -> None:
    """Logs a handler's failure: a :class:`Retryable` or :class:`Permanent`
    is the handler's own word (no traceback); anything else is a surprise,
    logged with its traceback."""
    how = "retryable" if failure.retryable else "permanent"
    if isinstance(error, (Retryable, InvalidResult)):
        log.info(
            "job %s attempt %d: failed (%s, %s): %s",
            attempt.job_id,
            attempt.attempt,
            how,
            failure.error_type,
            failure.message,
        )
    else:
        log.warning(
            "job %s attempt %d: the handler raised %s (reported as %s)",
            attempt.job_id,
            attempt.attempt,
            type(error).__name__,
            how,
            exc_info=error,
        )


TIMEOUT_FAILURE_TYPE = "timeout"


def timeout_failure(attempt: Attempt) -> Failure:
    return Failure(
        True,
        TIMEOUT_FAILURE_TYPE,
        f"attempt {attempt.attempt} ran past its deadline ({attempt.deadline.isoformat()})",
    )


# The first heartbeat of an attempt comes this soon (seconds) at most.
FIRST_BEAT = 1.0


class Schedule:
    """When an attempt's next heartbeat is due, and when its deadline
    makes the SDK stop its handler (all ``time.monotonic()`` values)."""

    def __init__(
        self,
        attempt: Attempt,
        clock: ServerClock,
        heartbeat_every: float | None,
    ) -> None:
        self.clock = clock
        self.fixed_every = heartbeat_every
        start = attempt.leased_at
        deadline = clock.monotonic_of(attempt.deadline)
        span = max(0.0, deadline - start)
        # Stop a little before the deadline, so that the timeout's report
        # arrives while the attempt is still held.
        self.timeout_at = deadline - min(1.0, 0.05 * span)
        self.lease_until = clock.monotonic_of(attempt.lease_expires_at)
        # The first beat soon: it takes the lease up (a lease that lapses
        # before any heartbeat or report was never received, and Receipt
        # hands its attempt back uncounted, a few times at most). Not at
        # once: an attempt done within the second takes it up with its
        # report, one call fewer.
        now = time.monotonic()
        self.next_beat = min(now + FIRST_BEAT, self._next(now))

    def _next(self, now: float) -> float:
        """Three heartbeats (at least) per lease: a third of what is left
        of it, between 50 ms and 30 s."""
        if self.fixed_every is not None:
            return now + self.fixed_every
        left = self.lease_until - now
        return now + min(30.0, max(0.05, left / 3.0))

    def extended(self, lease_expires_at: str, now: float) -> None:
        from ._http import parse_time

        self.lease_until = self.clock.monotonic_of(parse_time(lease_expires_at))
        self.next_beat = self._next(now)

    def retry_beat(self, now: float) -> None:
        self.next_beat = self._next(now)

    def beat_deadline(self, now: float) -> float:
        """How long a heartbeat's tries may go on: until the lease lapses
        (at least a second)."""
        return max(1.0, self.lease_until - now)


class Handlers(Generic[H]):
    """The kinds a worker runs, each with its handler."""

    def __init__(self) -> None:
        self.by_kind: dict[str, H] = {}

    def add(self, name: str, handler: H) -> None:
        check_kind_name(name)
        if name in self.by_kind:
            raise ValueError(f"kind {name!r} already has a handler")
        if len(self.by_kind) >= MOST_KINDS:
            raise ValueError(f"a worker runs at most {MOST_KINDS} kinds")
        self.by_kind[name] = handler

    def names(self) -> list[str]:
        return list(self.by_kind)


@dataclass(frozen=True)
class Settings:
    base_url: str
    key: str
    name: str
    concurrency: int
    shutdown_grace: float
    retry: RetryPolicy
    heartbeat_every: float | None
    install_signal_handlers: bool


def settings(
    base_url: str,
    key: str,
    name: str | None,
    concurrency: int,
    shutdown_grace: float,
    retry: RetryPolicy | None,
    heartbeat_every: float | None,
    install_signal_handlers: bool,
) -> Settings:
    if concurrency < 1:
        raise ValueError("concurrency is at least 1")
    if shutdown_grace < 0:
        raise ValueError("shutdown_grace is at least 0")
    if heartbeat_every is not None and heartbeat_every <= 0:
        raise ValueError("heartbeat_every is more than 0")
    return Settings(
        base_url=base_url.rstrip("/"),
        key=key,
        name=check_worker_name(name if name is not None else default_name()),
        concurrency=concurrency,
        shutdown_grace=shutdown_grace,
        retry=retry or RetryPolicy(),
        heartbeat_every=heartbeat_every,
        install_signal_handlers=install_signal_handlers,
    )


LEASE_TIMEOUT = httpx.Timeout(LEASE_WAIT_SECS + 15.0, connect=10.0)
CALL_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
# One pool per worker: a lease, and a heartbeat and a report per slot.
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=20)


def free_slots(concurrency: int, handling: int, held: int) -> int:
    """How many attempts the next lease may ask for: a slot is free once
    its handler has returned, while its report is still on its way (so a
    busy worker leases its next attempts while its last ones are reported),
    and the attempts held in all (handled or reporting) stay within twice
    ``concurrency``, so reports that cannot be sent stop the leasing."""
    return min(concurrency - handling, 2 * concurrency - held)


def lease_body(name: str, kinds: list[str], free: int) -> dict[str, Any]:
    return {
        "worker": name,
        "kinds": kinds,
        "max": max(1, min(MOST_LEASED, free)),
        "wait_secs": LEASE_WAIT_SECS,
    }


def attempts_of(response: httpx.Response, leased_at: float) -> list[Attempt]:
    items = response.json().get("attempts") or []
    return [Attempt.from_lease(item, leased_at) for item in items]


class BeatAnswer:
    """What a heartbeat's answer means for the attempt."""

    OK = "ok"
    CANCEL = "cancel"
    LOST = "lost"
    RETRY = "retry"


def read_beat(attempt: Attempt, response: httpx.Response) -> tuple[str, str | None]:
    """(BeatAnswer, the new lease_expires_at)."""
    status = response.status_code
    if 200 <= status < 300:
        body = response.json()
        expires = body.get("lease_expires_at")
        if body.get("cancel_requested"):
            return BeatAnswer.CANCEL, expires
        return BeatAnswer.OK, expires
    if status in (404, 409):
        problem = api_error(response).problem
        # While its report is being sent, the attempt may end under the
        # heartbeat: that is no news.
        level = logging.DEBUG if attempt._state == REPORTING else logging.WARNING
        log.log(
            level,
            "job %s attempt %d: the heartbeat says the attempt is no longer held (%s: %s); "
            "stopping its handler, reporting nothing",
            attempt.job_id,
            attempt.attempt,
            problem.type,
            problem.detail,
        )
        return BeatAnswer.LOST, None
    problem = api_error(response).problem
    log.error(
        "job %s attempt %d: heartbeat refused with %d (%s: %s)",
        attempt.job_id,
        attempt.attempt,
        status,
        problem.type,
        problem.detail,
    )
    return BeatAnswer.RETRY, None


def heartbeat_body(attempt: Attempt) -> dict[str, Any]:
    progress = attempt._progress
    return {} if progress is None else {"progress": progress}


def read_report(attempt: Attempt, what: str, response: httpx.Response) -> bool:
    """Logs a report's answer; True when Receipt took it. A 409 (the
    attempt is no longer held) or a 404 is final: logged and dropped."""
    status = response.status_code
    if 200 <= status < 300:
        return read_report_answer(attempt, what, status, None)
    return read_report_answer(attempt, what, status, api_error(response).problem)


def read_report_answer(attempt: Attempt, what: str, status: int, problem: Problem | None) -> bool:
    """:func:`read_report` of an answer's status and problem (a report's
    own call's, or its answer among a batch's)."""
    if 200 <= status < 300:
        log.debug("job %s attempt %d: %s reported", attempt.job_id, attempt.attempt, what)
        return True
    problem = problem or Problem.from_body(status, None)
    level = logging.WARNING if status in (404, 409) else logging.ERROR
    log.log(
        level,
        "job %s attempt %d: %s refused with %d (%s: %s); dropped",
        attempt.job_id,
        attempt.attempt,
        what,
        status,
        problem.type,
        problem.detail,
    )
    return False


def rejected_result(response: httpx.Response) -> Failure | None:
    """A complete refused for its body (too large, a media type the kind
    does not declare, not JSON): the same result would be refused again,
    so the attempt fails for good, saying why."""
    if response.status_code in REJECTED_RESULT:
        return rejected_failure(api_error(response).problem)
    return None


# The answers to a complete that refuse its result itself.
REJECTED_RESULT = (400, 413, 415, 422)


def rejected_failure(problem: Problem) -> Failure:
    return Failure(
        False,
        "result_rejected",
        message_of(f"Receipt refused the result ({problem.status}): {problem.detail}"),
    )


def batch_item(
    attempt: Attempt, what: str, body: object | None, failure: Failure | None
) -> bytes | None:
    """The report as one of a batch's, or None when it goes alone (a
    streamed result, a result of another media type, or a big one)."""
    if what == "complete":
        if not fits_batch(body):
            return None
        assert isinstance(body, BytesBody)
        return report_item(attempt, what, body.data)
    if what == "fail":
        assert failure is not None
        return report_item(attempt, what, failure.body())
    return report_item(attempt, what, None)


def read_batched(attempt: Attempt, what: str, answer: ReportAnswer) -> Failure | None:
    """Logs a batched report's answer, as :func:`read_report` does; for a
    complete whose result was refused, the failure to report instead."""
    status = answer.status
    problem = None if 200 <= status < 300 else Problem.from_body(status, answer.body)
    if what == "complete" and problem is not None and status in REJECTED_RESULT:
        rejected = rejected_failure(problem)
        log.error("job %s attempt %d: %s", attempt.job_id, attempt.attempt, rejected.message)
        return rejected
    read_report_answer(attempt, what, status, problem)
    return None


def could_not_report(attempt: Attempt, what: str, error: Exception) -> None:
    log.error(
        "job %s attempt %d: could not report %s: %s; the lease lapses and the job runs again",
        attempt.job_id,
        attempt.attempt,
        what,
        error,
    )


def report_headers(attempt: Attempt) -> dict[str, str]:
    traceparent = attempt._report_traceparent or attempt.traceparent
    return {"traceparent": traceparent} if traceparent else {}


def was_cancel_requested(attempt: Attempt) -> bool:
    return attempt.stop_reason == CANCEL_REQUESTED
