"""An attempt a worker leased, as its handler sees it."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._http import parse_time
from .errors import Cancelled

__all__ = ["Attempt"]

# Why an attempt must stop (Cancelled.reason, Attempt.stop_reason).
CANCEL_REQUESTED = "cancel_requested"
LOST = "lost"
TIMEOUT = "timeout"
SHUTDOWN = "shutdown"

# Who reports the attempt's end: one of them, once.
RUNNING = "running"  # the handler runs; nobody has reported
REPORTING = "reporting"  # the handler ended; its outcome is being reported
TIMED_OUT = "timed_out"  # the deadline came first; the SDK reported the timeout
ABANDONED = "abandoned"  # lost, or left at shutdown: nothing is reported


@dataclass(eq=False)
class Attempt:
    """One attempt of a job, leased by a worker.

    The handler reads ``params`` (the job's parameters, checked against the
    kind's schema), ``job_id``, ``kind``, ``attempt`` (1 for the first),
    ``max_attempts``, ``priority``, ``lease_expires_at`` and ``deadline``
    (when the attempt must have ended: the kind's ``timeout_secs`` from the
    lease) and ``traceparent``. It may report its progress with
    :meth:`progress`, and should look at :attr:`cancelled` (or call
    :meth:`check_cancel`, or wait with :meth:`sleep`) at its checkpoints:
    a client's cancel reaches it through the next heartbeat."""

    token: str
    job_id: str
    kind: str
    attempt: int
    max_attempts: int
    params: Any
    priority: str
    lease_expires_at: datetime
    deadline: datetime
    traceparent: str | None = None
    leased_at: float = 0.0  # time.monotonic() of the lease

    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _stop_reason: str | None = field(default=None, repr=False)
    _state: str = field(default=RUNNING, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _progress: float | None = field(default=None, repr=False)
    _shutting_down: bool = field(default=False, repr=False)
    _report_traceparent: str | None = field(default=None, repr=False)

    @classmethod
    def from_lease(cls, item: dict[str, Any], leased_at: float) -> Attempt:
        return cls(
            token=str(item["token"]),
            job_id=str(item["job_id"]),
            kind=str(item["kind"]),
            attempt=int(item["attempt"]),
            max_attempts=int(item["max_attempts"]),
            params=item.get("params"),
            priority=str(item.get("priority", "normal")),
            lease_expires_at=parse_time(str(item["lease_expires_at"])),
            deadline=parse_time(str(item["deadline"])),
            traceparent=item.get("traceparent") or None,
            leased_at=leased_at,
        )

    # -- for handlers ------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once the handler should stop: a client cancelled the job
        (``stop_reason == "cancel_requested"``), the lease was lost, the
        deadline passed, or the worker's shutdown grace ran out."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> str | None:
        """Why :attr:`cancelled` is true (see :class:`Cancelled`), else None."""
        return self._stop_reason

    @property
    def shutting_down(self) -> bool:
        """True once the worker is stopping (SIGTERM, SIGINT, ``stop()``):
        it waits for this handler up to its grace period, so a long handler
        may choose to end early with :class:`Retryable`."""
        return self._shutting_down

    def check_cancel(self) -> None:
        """Raises :class:`Cancelled` once :attr:`cancelled` is true."""
        if self._stop.is_set():
            raise Cancelled(self._stop_reason or CANCEL_REQUESTED)

    def sleep(self, seconds: float) -> None:
        """Sleeps (sync handlers), but raises :class:`Cancelled` as soon as
        the attempt must stop."""
        if self._stop.wait(max(0.0, seconds)):
            raise Cancelled(self._stop_reason or CANCEL_REQUESTED)

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Blocks until the attempt must stop or ``timeout`` passes; returns
        :attr:`cancelled`."""
        return self._stop.wait(timeout)

    def progress(self, fraction: float) -> None:
        """How far the attempt is, 0 to 1: sent with the next heartbeat, and
        shown as the job's ``progress``."""
        value = float(fraction)
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"progress is from 0 to 1, not {fraction!r}")
        self._progress = value

    # -- for the SDK -------------------------------------------------------
    def _must_stop(self, reason: str) -> None:
        with self._lock:
            # A cancel request gives way to the reasons that end the
            # attempt for the SDK (lost, timeout, shutdown); those stay.
            if self._stop_reason not in (LOST, TIMEOUT, SHUTDOWN):
                self._stop_reason = reason
        self._stop.set()

    def _claim(self, state: str) -> bool:
        """Moves from RUNNING to ``state``; False when another already did."""
        with self._lock:
            if self._state != RUNNING:
                return False
            self._state = state
            return True

    def _abandon(self, reason: str) -> bool:
        """Nothing is to be reported (lost, shutdown): stops the handler.
        False when the outcome is being reported already."""
        with self._lock:
            claimed = self._state == RUNNING
            if claimed:
                self._state = ABANDONED
        self._must_stop(reason)
        return claimed
