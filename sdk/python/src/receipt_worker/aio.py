"""The asyncio worker: handlers are ``async def`` functions, each attempt's
handler runs as a task, and a cancel reaches it as task cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
from ._http import AsyncSender, BytesBody, RetryPolicy, api_error
from ._reports import ALONE, AsyncReporter
from .attempt import (
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

__all__ = ["AsyncWorker", "AsyncHandler"]

log = logging.getLogger("receipt_worker")

AsyncHandler = Callable[[Attempt], Awaitable[Any]] | Callable[[Attempt], Any]
F = TypeVar("F", bound=AsyncHandler)


@dataclass
class _Outcome:
    what: str  # "complete", "fail" or "cancelled"
    body: BytesBody | StreamBody | None = None
    failure: Failure | None = None


class AsyncWorker:
    """The asyncio twin of :class:`~receipt_worker.Worker`::

        worker = AsyncWorker("http://127.0.0.1:8080", "rk_...", name="reports-1", concurrency=4)

        @worker.kind("sales-export")
        async def sales_export(attempt):
            return {"rows": 3}

        await worker.run()

    It behaves as the sync worker does (leases, heartbeats, reports,
    retries, shutdown; see there), with these differences: each handler
    runs as a task of the loop; a client's cancel, a lost lease and the
    deadline cancel that task (``asyncio.CancelledError`` at its next
    ``await``), after which the SDK reports ``cancelled``, nothing, or a
    retryable ``timeout``. A plain (not async) function is accepted too
    and runs in a thread of its own; it sees cancellation only through
    :attr:`Attempt.cancelled`.

    SIGTERM and SIGINT stop it when ``run()`` runs in the main thread (with
    ``install_signal_handlers``); :meth:`stop` may be called from any
    thread. Handlers still running when ``shutdown_grace`` ends are
    cancelled and not reported: their leases lapse and they run again."""

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
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """The same arguments as :class:`~receipt_worker.Worker`'s."""
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
        self._handlers: Handlers[AsyncHandler] = Handlers()
        self._is_async: dict[str, bool] = {}
        self._transport = transport
        # Every attempt held, until it is reported (or given up on).
        self._runners: dict[asyncio.Task[None], Attempt] = {}
        # Attempts whose handler has not returned yet (from their lease
        # on): the slots taken.
        self._handling: set[Attempt] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._stopping: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._sender: AsyncSender | None = None
        self._reporter: AsyncReporter | None = None
        self._running = False
        self._stop_early = False

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def stopping(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    def kind(self, name: str) -> Callable[[F], F]:
        """Decorator: ``fn`` runs the attempts of kind ``name``."""

        def register(fn: F) -> F:
            self.add_kind(name, fn)
            return fn

        return register

    def add_kind(self, name: str, handler: AsyncHandler) -> None:
        """``handler(attempt)`` (async, or a plain function run in a
        thread) runs the attempts of kind ``name``."""
        self._handlers.add(name, handler)
        self._is_async[name] = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        )

    def stop(self) -> None:
        """Stops leasing and begins the shutdown; ``run()`` returns once it
        is over. Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stop_early = True  # run() has not begun: it stops at once
            return
        if threading.get_ident() == self._loop_thread:
            self._stop_now()
        else:
            loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        if self._stopping is not None and self._changed is not None:
            self._stopping.set()
            self._changed.set()

    def _on_signal(self) -> None:
        if self._stopping is not None and self._stopping.is_set():
            if self._force is not None and self._changed is not None:
                log.warning("worker %s: second signal: not waiting any more", self._settings.name)
                self._force.set()
                self._changed.set()
        else:
            self._stop_now()

    # -- running -----------------------------------------------------------
    async def run(self) -> None:
        """Leases and runs attempts until :meth:`stop` or a signal."""
        kinds = self._handlers.names()
        if not kinds:
            raise ValueError("no kinds to run: add a handler with @worker.kind(name)")
        if self._running:
            raise RuntimeError("this worker is running already")
        self._running = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._stopping = asyncio.Event()
        self._force = asyncio.Event()
        self._changed = asyncio.Event()
        if self._stop_early:
            self._stop_early = False
            self._stopping.set()
        client = httpx.AsyncClient(
            base_url=self._settings.base_url,
            transport=self._transport,
            timeout=CALL_TIMEOUT,
            limits=LIMITS,
        )
        self._sender = AsyncSender(client, self._settings.key, self._settings.retry)
        self._reporter = AsyncReporter(self._sender)
        installed = self._install_signal_handlers(loop)
        try:
            log.info(
                "worker %s: running kinds %s, %d at once",
                self._settings.name,
                ", ".join(kinds),
                self._settings.concurrency,
            )
            await self._lease_loop(kinds)
            await self._drain()
        except asyncio.CancelledError:
            # run() itself was cancelled: give up on everything at once.
            await self._abandon_all(wait=1.0)
            raise
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            await client.aclose()
            self._running = False
            self._loop = None
            log.info("worker %s: stopped", self._settings.name)

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if not self._settings.install_signal_handlers:
            return []
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[int] = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, self._on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            installed.append(signum)
        return installed

    async def _pause(self, seconds: float) -> None:
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _lease_once(self, kinds: list[str], free: int) -> list[Attempt]:
        sender = self._sender
        assert sender is not None
        response = await sender.send(
            "POST",
            "/v1/work/lease",
            json_body=lease_body(self._settings.name, kinds, free),
            timeout=LEASE_TIMEOUT,
            deadline=0,
        )
        if response.status_code != 200:
            raise api_error(response)
        return attempts_of(response, time.monotonic())

    async def _lease_loop(self, kinds: list[str]) -> None:
        stopping, changed = self._stopping, self._changed
        assert stopping is not None and changed is not None
        failures = 0
        while not stopping.is_set():
            while self._free() <= 0 and not stopping.is_set():
                changed.clear()
                await changed.wait()
            if stopping.is_set():
                return
            free = self._free()
            lease = asyncio.ensure_future(self._lease_once(kinds, free))
            stop_wait = asyncio.ensure_future(stopping.wait())
            try:
                await asyncio.wait({lease, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
                if not lease.done():
                    # The worker stops: cut the long poll off, so that Receipt
                    # leases it nothing more.
                    lease.cancel()
                    await asyncio.wait({lease})
            if lease.cancelled():
                return
            error = lease.exception()
            if error is None:
                failures = 0
                # Attempts in hand are run, even when the stop came meanwhile:
                # they are held now, and the drain gives them the grace.
                for attempt in lease.result():
                    self._start(attempt)
                continue
            if stopping.is_set():
                return
            if not isinstance(error, (ApiError, ConnectionFailed, ValueError, KeyError)):
                raise error
            failures += 1
            retry_after = error.retry_after if isinstance(error, ApiError) else None
            pause = self._settings.retry.backoff(failures, retry_after)
            level = logging.WARNING if failures in (1, 5) or failures % 30 == 0 else logging.DEBUG
            log.log(level, "lease failed (%d in a row): %s; again in %.1fs", failures, error, pause)
            await self._pause(pause)

    def _free(self) -> int:
        return free_slots(self._settings.concurrency, len(self._handling), len(self._runners))

    def _slot_freed(self, attempt: Attempt) -> None:
        self._handling.discard(attempt)
        if self._changed is not None:
            self._changed.set()

    def _start(self, attempt: Attempt) -> None:
        log.debug("job %s attempt %d: leased", attempt.job_id, attempt.attempt)
        if self.stopping:
            attempt._shutting_down = True
        task = asyncio.ensure_future(self._run_attempt(attempt))
        self._runners[task] = attempt
        # Taken now, not when the task first runs: the lease loop asks for
        # the slots left before it does.
        self._handling.add(attempt)
        task.add_done_callback(self._runner_done)

    def _runner_done(self, task: asyncio.Task[None]) -> None:
        attempt = self._runners.pop(task, None)
        if attempt is not None:
            # Let go: also where its handler never started.
            self._handling.discard(attempt)
        if not task.cancelled() and task.exception() is not None and attempt is not None:
            log.error(
                "job %s attempt %d: unexpected error",
                attempt.job_id,
                attempt.attempt,
                exc_info=task.exception(),
            )
        if self._changed is not None:
            self._changed.set()

    async def _drain(self) -> None:
        changed, force = self._changed, self._force
        assert changed is not None and force is not None
        grace = self._settings.shutdown_grace
        for attempt in self._runners.values():
            attempt._shutting_down = True
        if self._runners:
            log.info(
                "worker %s: stopping; waiting up to %.0fs for %d running attempt(s)",
                self._settings.name,
                grace,
                len(self._runners),
            )
        loop = asyncio.get_running_loop()
        until = loop.time() + grace
        while self._runners and not force.is_set():
            left = until - loop.time()
            if left <= 0:
                break
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), timeout=left)
            except asyncio.TimeoutError:
                break
        await self._abandon_all(wait=2.0)

    async def _abandon_all(self, wait: float) -> None:
        left_over = list(self._runners.items())
        if not left_over:
            return
        for task, attempt in left_over:
            attempt._abandon(SHUTDOWN)
            task.cancel()
        log.warning(
            "worker %s: %d attempt(s) did not finish within the grace and are not reported; "
            "their leases lapse and they run again: %s",
            self._settings.name,
            len(left_over),
            ", ".join(f"{a.job_id} (attempt {a.attempt})" for _, a in left_over),
        )
        await asyncio.wait([task for task, _ in left_over], timeout=wait)

    # -- one attempt -------------------------------------------------------
    async def _run_attempt(self, attempt: Attempt) -> None:
        """Runs the handler as a task and heartbeats the attempt while the
        handler (and then its report) runs; acts on the deadline, a cancel
        request and a lost lease."""
        sender = self._sender
        assert sender is not None
        schedule = Schedule(attempt, sender.clock, self._settings.heartbeat_every)
        handler = asyncio.ensure_future(self._call(attempt))
        handler.add_done_callback(lambda _: self._slot_freed(attempt))
        # A plain handler runs in a thread, which no cancel stops: it sees
        # attempt.cancelled, and its slot stays taken until it returns.
        cancellable = self._is_async.get(attempt.kind, True)
        report: asyncio.Future[None] | None = None
        beating = True
        try:
            while True:
                current = report if report is not None else handler
                loop_now = time.monotonic()
                wake = schedule.next_beat if beating else loop_now + 3600.0
                if attempt._state == RUNNING:
                    wake = min(wake, schedule.timeout_at)
                done, _ = await asyncio.wait({current}, timeout=max(0.0, wake - loop_now))
                if current in done:
                    if current is handler:
                        outcome = handler.result()
                        if attempt._claim(REPORTING):
                            report = asyncio.ensure_future(self._send(attempt, outcome))
                            continue
                        log.info(
                            "job %s attempt %d: the handler ended after the attempt was %s; "
                            "its outcome is not reported",
                            attempt.job_id,
                            attempt.attempt,
                            attempt.stop_reason or attempt._state,
                        )
                        return
                    # The report is done (a timeout's, or the handler's):
                    # wait for the handler too, so its slot stays taken
                    # until it has stopped.
                    if not handler.done():
                        await asyncio.wait({handler})
                    return
                loop_now = time.monotonic()
                if attempt._state == RUNNING and loop_now >= schedule.timeout_at:
                    if attempt._claim(TIMED_OUT):
                        attempt._must_stop(TIMEOUT)
                        if cancellable:
                            handler.cancel()
                        log.warning(
                            "job %s attempt %d: past its deadline; cancelling it, reporting a "
                            "timeout",
                            attempt.job_id,
                            attempt.attempt,
                        )
                        report = asyncio.ensure_future(
                            self._send(attempt, _Outcome("fail", failure=timeout_failure(attempt)))
                        )
                        beating = False
                    continue
                if beating and loop_now >= schedule.next_beat:
                    verdict = await self._beat(attempt, schedule, loop_now)
                    if verdict == BeatAnswer.LOST:
                        attempt._abandon(LOST)
                        if cancellable:
                            handler.cancel()
                        beating = False
                    elif verdict == BeatAnswer.CANCEL and attempt.stop_reason is None:
                        log.info(
                            "job %s attempt %d: cancel requested", attempt.job_id, attempt.attempt
                        )
                        attempt._must_stop(CANCEL_REQUESTED)
                        if cancellable:
                            handler.cancel()
        except asyncio.CancelledError:
            # Given up on at shutdown (or run() was cancelled): nothing is
            # reported, the lease lapses.
            attempt._abandon(SHUTDOWN)
            handler.cancel()
            if report is not None:
                report.cancel()
            raise

    async def _beat(self, attempt: Attempt, schedule: Schedule, now: float) -> str:
        sender = self._sender
        assert sender is not None
        try:
            response = await sender.send(
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

    async def _call(self, attempt: Attempt) -> _Outcome:
        """The handler's task: runs it in the attempt's span; its end, as
        an outcome to report."""
        with _tracing.attempt_span(attempt) as span:
            attempt._report_traceparent = _tracing.traceparent_of(span)
            try:
                handler = self._handlers.by_kind.get(attempt.kind)
                if handler is None:
                    raise Permanent(
                        f"this worker has no handler for kind {attempt.kind!r}",
                        error_type="unknown_kind",
                    )
                if self._is_async.get(attempt.kind, False):
                    value = await handler(attempt)
                else:
                    value = await _in_thread(handler, attempt)
                if inspect.isawaitable(value):
                    value = await value
                outcome = _Outcome("complete", body=body_of(value))
            except asyncio.CancelledError:
                if attempt.stop_reason is None:
                    raise  # not cancelled by the SDK
                outcome = _Outcome("cancelled")
            except Cancelled:
                outcome = _Outcome("cancelled")
            except Exception as e:
                _tracing.mark_error(span, e)
                failure = failure_of(e)
                log_failure(attempt, e, failure)
                outcome = _Outcome("fail", failure=failure)
            _tracing.set_outcome(span, outcome.what)
            return outcome

    async def _send(self, attempt: Attempt, outcome: _Outcome) -> None:
        """As the sync worker's: a report with retries; a refusal is logged
        and dropped; a refused result becomes a permanent failure."""
        sender, reporter = self._sender, self._reporter
        assert sender is not None and reporter is not None
        item = batch_item(attempt, outcome.what, outcome.body, outcome.failure)
        if item is not None:
            try:
                answer = await reporter.report(attempt, item)
            except (ApiError, ConnectionFailed) as e:
                could_not_report(attempt, outcome.what, e)
                return
            if answer is not ALONE:
                rejected = read_batched(attempt, outcome.what, answer)
                if rejected is not None:
                    await self._send(attempt, _Outcome("fail", failure=rejected))
                return
        path = f"/v1/work/attempts/{quote(attempt.token, safe='')}"
        headers = report_headers(attempt)
        try:
            if outcome.what == "complete":
                assert outcome.body is not None
                try:
                    response = await sender.send(
                        "POST", f"{path}/complete", body=outcome.body, headers=headers
                    )
                except (SourceFailed, InvalidResult) as e:
                    log.warning(
                        "job %s attempt %d: the result's stream failed: %s",
                        attempt.job_id,
                        attempt.attempt,
                        e,
                    )
                    await self._send(attempt, _Outcome("fail", failure=failure_of(e)))
                    return
                finally:
                    if isinstance(outcome.body, StreamBody):
                        outcome.body.close()
                rejected = rejected_result(response)
                if rejected is not None:
                    log.error(
                        "job %s attempt %d: %s", attempt.job_id, attempt.attempt, rejected.message
                    )
                    await self._send(attempt, _Outcome("fail", failure=rejected))
                    return
                read_report(attempt, "complete", response)
            elif outcome.what == "fail":
                assert outcome.failure is not None
                response = await sender.send(
                    "POST", f"{path}/fail", json_body=outcome.failure.body(), headers=headers
                )
                read_report(attempt, "fail", response)
            else:
                response = await sender.send("POST", f"{path}/cancelled", headers=headers)
                read_report(attempt, "cancelled", response)
        except (ApiError, ConnectionFailed) as e:
            could_not_report(attempt, outcome.what, e)


async def _in_thread(fn: Callable[[Attempt], Any], attempt: Attempt) -> Any:
    """Runs a plain handler in a daemon thread of its own (not the loop's
    executor, whose threads a closing loop waits for), in the caller's
    context (so its span is current)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value = context.run(fn, attempt)
        except BaseException as e:  # noqa: BLE001 - handed to the loop
            error: BaseException | None = e
            value = None
        else:
            error = None
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop has closed

    threading.Thread(target=target, name=f"receipt-{attempt.token}", daemon=True).start()
    return await future
