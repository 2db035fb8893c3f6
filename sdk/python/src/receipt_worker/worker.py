"""The sync worker: handlers are plain functions, each attempt's handler
runs in a thread of its own."""

from __future__ import annotations

import inspect
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from . import _tracing
from ._common import (
    CALL_TIMEOUT,
    LEASE_TIMEOUT,
    LIMITS,
    BeatAnswer,
    Failure,
    Handlers,
    Schedule,
    attempts_of,
    batch_item,
    could_not_report,
    failure_of,
    free_slots,
    heartbeat_body,
    lease_body,
    log_failure,
    read_batched,
    read_beat,
    read_report,
    rejected_result,
    report_headers,
    settings,
    timeout_failure,
)
from ._http import AbortTracker, BytesBody, RetryPolicy, SyncSender, api_error
from ._reports import ALONE, SyncReporter
from .attempt import (
    ABANDONED,
    CANCEL_REQUESTED,
    LOST,
    REPORTING,
    RUNNING,
    SHUTDOWN,
    TIMED_OUT,
    TIMEOUT,
    Attempt,
)
from .errors import ApiError, Cancelled, ConnectionFailed, Permanent
from .results import InvalidResult, SourceFailed, StreamBody, body_of

__all__ = ["Worker", "SyncHandler"]

log = logging.getLogger("receipt_worker")

SyncHandler = Callable[[Attempt], Any]
F = TypeVar("F", bound=SyncHandler)

# How often waits look at the stop flags (a signal handler only sets them).
POLL = 0.2


@dataclass
class _Outcome:
    what: str  # "complete", "fail" or "cancelled"
    body: BytesBody | StreamBody | None = None
    failure: Failure | None = None


class Worker:
    """Runs the handlers of a tenant's registered kinds, with a key of the
    ``work`` scope::

        worker = Worker("http://127.0.0.1:8080", "rk_...", name="reports-1", concurrency=4)

        @worker.kind("sales-export")
        def sales_export(attempt):
            return {"rows": 3}

        worker.run()

    ``run()`` leases attempts (a long poll asking for as many as there are
    free slots out of ``concurrency``), runs each handler in a thread,
    heartbeats each attempt in the background (at least three times per
    lease, sending its :meth:`Attempt.progress`), and reports how it ended:

    - a return value: ``complete`` with it as the result (JSON, or a
      :class:`Result` / :class:`Stream` in a declared media type);
    - :class:`Retryable` / :class:`Permanent`: ``fail``, retryable or not;
      any other exception: a retryable ``fail`` whose ``error_type`` is the
      exception's class name;
    - :class:`Cancelled` (after a client's cancel reached the handler
      through a heartbeat: :attr:`Attempt.cancelled`): ``cancelled``;
    - past the attempt's deadline: the SDK reports a retryable ``timeout``
      and the handler sees :attr:`Attempt.cancelled`; whatever it does
      afterwards is not reported;
    - a heartbeat answered 409 (the attempt is no longer held: its lease
      lapsed and another attempt took over, or the job ended): the handler
      sees :attr:`Attempt.cancelled` and nothing is reported.

    Every call is tried again on a transport error, a 429 or a 5xx (after
    ``Retry-After``), with the same body; a 409 on a report is final.

    **Stopping.** SIGTERM or SIGINT (when ``run()`` is called in the main
    thread and ``install_signal_handlers`` is true), or :meth:`stop` from
    any thread, stops leasing at once (a lease waiting for attempts is cut
    off) and waits up to ``shutdown_grace`` seconds for the running
    handlers, reporting how each ended; heartbeats go on meanwhile. A
    second signal ends the wait. An attempt whose handler has not ended by
    then is not reported at all, success included: its heartbeats stop,
    its lease lapses (``JOB_LEASE``), and Receipt gives the job to another
    worker as a new attempt (which counts against ``max_attempts``). Then
    ``run()`` returns. Handler threads are daemon threads: one that never
    returns does not keep the process alive.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        name: str | None = None,
        concurrency: int = 4,
        shutdown_grace: float = 30.0,
        retry: RetryPolicy | None = None,
        heartbeat_every: float | None = None,
        install_signal_handlers: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``base_url``: Receipt's address; ``key``: a key with the ``work``
        scope; ``name``: the worker's name as jobs show it (default: host
        and pid); ``concurrency``: handlers run at once (a slot is free again
        once its handler returns, while its report is on its way; at most
        twice as many attempts are held); ``shutdown_grace``:
        seconds a stop waits for running handlers; ``retry``: how calls are
        tried again; ``heartbeat_every``: a fixed heartbeat interval in
        seconds (default: a third of what is left of the lease);
        ``transport``: an httpx transport (tests)."""
        self._settings = settings(
            base_url,
            key,
            name,
            concurrency,
            shutdown_grace,
            retry,
            heartbeat_every,
            install_signal_handlers,
        )
        self._handlers: Handlers[SyncHandler] = Handlers()
        self._transport = transport
        self._cond = threading.Condition(threading.RLock())
        # Every attempt held, until it is reported (or given up on).
        self._active: set[Attempt] = set()
        # Attempts whose handler has not returned yet: the slots taken.
        self._handling = 0
        self._stop_flag = False
        self._force_flag = False
        self._tracker = AbortTracker()
        self._run_thread: int | None = None
        self._sender: SyncSender | None = None
        self._reporter: SyncReporter | None = None
        self._running = False

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def stopping(self) -> bool:
        return self._stop_flag

    def kind(self, name: str) -> Callable[[F], F]:
        """Decorator: ``fn`` runs the attempts of kind ``name``."""

        def register(fn: F) -> F:
            self.add_kind(name, fn)
            return fn

        return register

    def add_kind(self, name: str, handler: SyncHandler) -> None:
        """``handler(attempt)`` runs the attempts of kind ``name``."""
        if inspect.iscoroutinefunction(handler):
            raise TypeError(f"{handler!r} is async: run it with AsyncWorker")
        self._handlers.add(name, handler)

    def stop(self) -> None:
        """Stops leasing and begins the shutdown described above; ``run()``
        returns once it is over. Safe from any thread and from a signal
        handler."""
        self._stop_flag = True
        if self._run_thread is not None:
            self._tracker.abort(self._run_thread)

    # -- running -----------------------------------------------------------
    def run(self) -> None:
        """Leases and runs attempts until :meth:`stop` or a signal; see the
        class's documentation for how it stops."""
        kinds = self._handlers.names()
        if not kinds:
            raise ValueError("no kinds to run: add a handler with @worker.kind(name)")
        if self._running:
            raise RuntimeError("this worker is running already")
        self._running = True
        transport = self._transport
        if transport is None:
            http_transport = httpx.HTTPTransport(limits=LIMITS)
            if not self._tracker.install(http_transport):
                log.debug("cannot cut a waiting lease off with this httpx; a stop waits for it")
            transport = http_transport
        client = httpx.Client(
            base_url=self._settings.base_url,
            transport=transport,
            timeout=CALL_TIMEOUT,
        )
        self._sender = SyncSender(client, self._settings.key, self._settings.retry)
        self._reporter = SyncReporter(self._sender)
        self._run_thread = threading.get_ident()
        self._tracker.reset(self._run_thread)
        previous = self._install_signal_handlers()
        try:
            log.info(
                "worker %s: running kinds %s, %d at once",
                self._settings.name,
                ", ".join(kinds),
                self._settings.concurrency,
            )
            self._lease_loop(kinds)
            self._drain()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._run_thread = None
            with self._cond:
                idle = not self._active
            if idle:
                client.close()
            self._running = False
            self._stop_flag = False
            self._force_flag = False
            log.info("worker %s: stopped", self._settings.name)

    def _install_signal_handlers(self) -> dict[int, Any]:
        if not self._settings.install_signal_handlers:
            return {}
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only flags and a socket shutdown here: a signal handler may run
        # while this very thread holds any lock.
        if self._stop_flag:
            self._force_flag = True
        else:
            self.stop()

    def _pause(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while not self._stop_flag:
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL, left))

    def _lease_loop(self, kinds: list[str]) -> None:
        sender = self._sender
        assert sender is not None
        failures = 0
        while not self._stop_flag:
            with self._cond:
                while self._free() <= 0 and not self._stop_flag:
                    self._cond.wait(POLL)
                free = self._free()
            if self._stop_flag:
                return
            body = lease_body(self._settings.name, kinds, free)
            retry_after: float | None = None
            try:
                response = sender.send(
                    "POST", "/v1/work/lease", json_body=body, timeout=LEASE_TIMEOUT, deadline=0
                )
                if response.status_code != 200:
                    raise api_error(response)
                attempts = attempts_of(response, time.monotonic())
            except (ApiError, ConnectionFailed, ValueError, KeyError) as e:
                if self._stop_flag:
                    return
                failures += 1
                if isinstance(e, ApiError):
                    retry_after = e.retry_after
                pause = self._settings.retry.backoff(failures, retry_after)
                level = (
                    logging.WARNING if failures in (1, 5) or failures % 30 == 0 else logging.DEBUG
                )
                log.log(level, "lease failed (%d in a row): %s; again in %.1fs", failures, e, pause)
                self._pause(pause)
                continue
            failures = 0
            for attempt in attempts:
                self._start(attempt)

    def _free(self) -> int:
        return free_slots(self._settings.concurrency, self._handling, len(self._active))

    def _start(self, attempt: Attempt) -> None:
        log.debug("job %s attempt %d: leased", attempt.job_id, attempt.attempt)
        with self._cond:
            self._active.add(attempt)
            self._handling += 1
        if self._stop_flag:
            attempt._shutting_down = True
        threading.Thread(
            target=self._supervise,
            args=(attempt,),
            name=f"receipt-beat-{attempt.token}",
            daemon=True,
        ).start()

    def _drain(self) -> None:
        grace = self._settings.shutdown_grace
        with self._cond:
            running = list(self._active)
        for attempt in running:
            attempt._shutting_down = True
        if running:
            log.info(
                "worker %s: stopping; waiting up to %.0fs for %d running attempt(s)",
                self._settings.name,
                grace,
                len(running),
            )
        until = time.monotonic() + grace
        with self._cond:
            while self._active and not self._force_flag:
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(POLL, left))
            left_over = list(self._active)
        for attempt in left_over:
            attempt._abandon(SHUTDOWN)
        if left_over:
            log.warning(
                "worker %s: %d attempt(s) did not finish within the grace and are not reported; "
                "their leases lapse and they run again: %s",
                self._settings.name,
                len(left_over),
                ", ".join(f"{a.job_id} (attempt {a.attempt})" for a in left_over),
            )

    # -- one attempt -------------------------------------------------------
    def _supervise(self, attempt: Attempt) -> None:
        """Heartbeats the attempt while its handler (and then its report)
        runs, and acts on the deadline, a cancel request or a lost lease."""
        finished = threading.Event()
        threading.Thread(
            target=self._handle,
            args=(attempt, finished),
            name=f"receipt-{attempt.token}",
            daemon=True,
        ).start()
        sender = self._sender
        assert sender is not None
        schedule = Schedule(attempt, sender.clock, self._settings.heartbeat_every)
        beating = True
        try:
            while True:
                now = time.monotonic()
                wake = schedule.next_beat if beating else now + 1.0
                if attempt._state == RUNNING:
                    wake = min(wake, schedule.timeout_at)
                if finished.wait(max(0.0, wake - now)):
                    return
                if attempt._state == ABANDONED and attempt.stop_reason == SHUTDOWN:
                    return  # left at shutdown: the lease lapses
                now = time.monotonic()
                if attempt._state == RUNNING and now >= schedule.timeout_at:
                    if attempt._claim(TIMED_OUT):
                        attempt._must_stop(TIMEOUT)
                        log.warning(
                            "job %s attempt %d: past its deadline; reporting a timeout",
                            attempt.job_id,
                            attempt.attempt,
                        )
                        self._send(attempt, _Outcome("fail", failure=timeout_failure(attempt)))
                        beating = False
                    continue
                if beating and now >= schedule.next_beat:
                    verdict = self._beat(attempt, schedule, now)
                    if verdict == BeatAnswer.LOST:
                        attempt._abandon(LOST)
                        beating = False
                    elif verdict == BeatAnswer.CANCEL and attempt.stop_reason is None:
                        log.info(
                            "job %s attempt %d: cancel requested", attempt.job_id, attempt.attempt
                        )
                        attempt._must_stop(CANCEL_REQUESTED)
        except Exception:
            log.exception("job %s attempt %d: heartbeats failed", attempt.job_id, attempt.attempt)

    def _beat(self, attempt: Attempt, schedule: Schedule, now: float) -> str:
        sender = self._sender
        assert sender is not None
        try:
            response = sender.send(
                "POST",
                f"/v1/work/attempts/{quote(attempt.token, safe='')}/heartbeat",
                json_body=heartbeat_body(attempt),
                headers=report_headers(attempt),
                deadline=schedule.beat_deadline(now),
            )
        except (ApiError, ConnectionFailed) as e:
            log.warning(
                "job %s attempt %d: heartbeat failed: %s", attempt.job_id, attempt.attempt, e
            )
            schedule.retry_beat(time.monotonic())
            return BeatAnswer.RETRY
        verdict, expires = read_beat(attempt, response)
        if expires:
            schedule.extended(expires, time.monotonic())
        else:
            schedule.retry_beat(time.monotonic())
        return verdict

    def _handle(self, attempt: Attempt, finished: threading.Event) -> None:
        """The handler's thread: runs it, then reports how it ended (its
        slot free meanwhile)."""
        handling = True
        try:
            handler = self._handlers.by_kind.get(attempt.kind)
            with _tracing.attempt_span(attempt) as span:
                attempt._report_traceparent = _tracing.traceparent_of(span)
                outcome = self._call(attempt, handler, span)
                handling = False
                self._free_slot()
                if not attempt._claim(REPORTING):
                    log.info(
                        "job %s attempt %d: the handler ended after the attempt was %s; "
                        "its outcome is not reported",
                        attempt.job_id,
                        attempt.attempt,
                        attempt.stop_reason or attempt._state,
                    )
                    return
                _tracing.set_outcome(span, outcome.what)
                self._send(attempt, outcome)
        except Exception:
            log.exception("job %s attempt %d: unexpected error", attempt.job_id, attempt.attempt)
        finally:
            finished.set()
            with self._cond:
                self._active.discard(attempt)
                self._cond.notify_all()
            if handling:
                self._free_slot()

    def _free_slot(self) -> None:
        with self._cond:
            self._handling -= 1
            self._cond.notify_all()

    def _call(self, attempt: Attempt, handler: SyncHandler | None, span: Any) -> _Outcome:
        try:
            if handler is None:
                raise Permanent(
                    f"this worker has no handler for kind {attempt.kind!r}",
                    error_type="unknown_kind",
                )
            value = handler(attempt)
            return _Outcome("complete", body=body_of(value))
        except Cancelled as e:
            return _Outcome("cancelled", failure=Failure(True, "cancelled", str(e)))
        except BaseException as e:  # noqa: BLE001 - every end of a handler is reported
            _tracing.mark_error(span, e)
            failure = failure_of(e)
            log_failure(attempt, e, failure)
            return _Outcome("fail", failure=failure)

    def _send(self, attempt: Attempt, outcome: _Outcome) -> None:
        """Sends a report, with retries; a refusal is logged and dropped,
        and a complete whose result Receipt refuses becomes a permanent
        failure saying why."""
        sender, reporter = self._sender, self._reporter
        assert sender is not None and reporter is not None
        item = batch_item(attempt, outcome.what, outcome.body, outcome.failure)
        if item is not None:
            try:
                answer = reporter.report(attempt, item)
            except (ApiError, ConnectionFailed) as e:
                could_not_report(attempt, outcome.what, e)
                return
            if answer is not ALONE:
                rejected = read_batched(attempt, outcome.what, answer)
                if rejected is not None:
                    self._send(attempt, _Outcome("fail", failure=rejected))
                return
        path = f"/v1/work/attempts/{quote(attempt.token, safe='')}"
        headers = report_headers(attempt)
        try:
            if outcome.what == "complete":
                assert outcome.body is not None
                try:
                    response = sender.send(
                        "POST", f"{path}/complete", body=outcome.body, headers=headers
                    )
                except (SourceFailed, InvalidResult) as e:
                    log.warning(
                        "job %s attempt %d: the result's stream failed: %s",
                        attempt.job_id,
                        attempt.attempt,
                        e,
                    )
                    self._send(attempt, _Outcome("fail", failure=failure_of(e)))
                    return
                finally:
                    if isinstance(outcome.body, StreamBody):
                        outcome.body.close()
                rejected = rejected_result(response)
                if rejected is not None:
                    log.error(
                        "job %s attempt %d: %s", attempt.job_id, attempt.attempt, rejected.message
                    )
                    self._send(attempt, _Outcome("fail", failure=rejected))
                    return
                read_report(attempt, "complete", response)
            elif outcome.what == "fail":
                assert outcome.failure is not None
                response = sender.send(
                    "POST", f"{path}/fail", json_body=outcome.failure.body(), headers=headers
                )
                read_report(attempt, "fail", response)
            else:
                response = sender.send("POST", f"{path}/cancelled", headers=headers)
                read_report(attempt, "cancelled", response)
        except (ApiError, ConnectionFailed) as e:
            could_not_report(attempt, outcome.what, e)
