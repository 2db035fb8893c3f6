"""Calls to Receipt with retries: every call is tried again on a transport
error, a 408, a 429 or a 5xx (after ``Retry-After`` when the answer has
one), with exponential backoff and equal jitter, and with the same body
each time, until its deadline. Shared by the workers and the client."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

import httpcore
import httpx

from ._version import __version__
from .errors import ApiError, ConnectionFailed, Problem

log = logging.getLogger("receipt_worker")

USER_AGENT = f"receipt-worker-python/{__version__}"


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is tried again.

    ``first_backoff`` doubles per try up to ``max_backoff``, with equal
    jitter (half of it fixed, half random), and never less than an answer's
    ``Retry-After``; tries stop ``deadline`` seconds after the first one,
    with the last try's error."""

    first_backoff: float = 0.1
    max_backoff: float = 5.0
    deadline: float = 120.0

    def backoff(self, tries: int, retry_after: float | None = None) -> float:
        """The pause after try number ``tries`` (1 for the first)."""
        ceiling = min(self.max_backoff, self.first_backoff * (2.0 ** max(0, tries - 1)))
        pause = ceiling / 2 + random.uniform(0, ceiling / 2)
        if retry_after is not None:
            pause = max(pause, retry_after)
        return pause


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: a whole number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def parse_time(value: str) -> datetime:
    """An RFC 3339 time as Receipt writes it (``...123Z``)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when


def is_retryable_status(status: int, headers: Mapping[str, str], retry_409: bool) -> bool:
    if status in (408, 429) or status >= 500:
        return True
    # An Idempotency-Key whose first request is still running: 409 with
    # Retry-After (a 409 about a resource's state has none).
    return retry_409 and status == 409 and "retry-after" in headers


def problem_of(response: httpx.Response) -> Problem:
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    return Problem.from_body(response.status_code, body, response.text if body is None else "")


def api_error(response: httpx.Response) -> ApiError:
    return ApiError(
        response.request.method,
        str(response.request.url),
        problem_of(response),
        parse_retry_after(response.headers.get("retry-after")),
    )


class ServerClock:
    """Maps Receipt's times to this machine's clock. Receipt's times
    (``lease_expires_at``, ``deadline``) are absolute; when this machine's
    clock is off by more than two seconds (seen in answers' ``Date``), the
    offset is taken into account."""

    def __init__(self) -> None:
        self.offset = 0.0  # server time minus local time, seconds

    def observe(self, response: httpx.Response) -> None:
        date = response.headers.get("date")
        if not date:
            return
        try:
            server = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError):
            return
        offset = server - time.time()
        # Date has whole seconds: only an offset well past that counts.
        self.offset = offset if abs(offset) > 2.0 else 0.0

    def local(self, when: datetime) -> float:
        """``when`` as a local ``time.time()`` value."""
        return when.timestamp() - self.offset

    def monotonic_of(self, when: datetime) -> float:
        """``when`` as a ``time.monotonic()`` value."""
        return time.monotonic() + (self.local(when) - time.time())


class Body(Protocol):
    """A request body that can be sent again, the same, on each try."""

    @property
    def content_type(self) -> str: ...

    def for_try(self, tries: int) -> bytes | Iterator[bytes]: ...


class AsyncBody(Protocol):
    @property
    def content_type(self) -> str: ...

    def for_try_async(self, tries: int) -> bytes | AsyncIterator[bytes]: ...


@dataclass(frozen=True)
class BytesBody:
    data: bytes
    content_type: str = "application/json"

    def for_try(self, tries: int) -> bytes:
        return self.data

    def for_try_async(self, tries: int) -> bytes:
        return self.data


class Stopped(Exception):
    """The worker stopped while a call waited to be tried again."""


def _headers(key: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT}
    if extra:
        headers.update(extra)
    return headers


class SyncSender:
    """Sends calls with retries through one pooled ``httpx.Client``."""

    def __init__(
        self,
        client: httpx.Client,
        key: str,
        policy: RetryPolicy,
        clock: ServerClock | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.policy = policy
        self.clock = clock or ServerClock()

    def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        body: Body | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float | None = None,
        deadline: float | None = None,
        retry_409: bool = False,
        stopped: Callable[[], bool] | None = None,
        pause: Callable[[float], None] = time.sleep,
    ) -> httpx.Response:
        """The first answer that is not worth another try (2xx, 3xx, 4xx
        but 408 and 429); raises :class:`ApiError` or
        :class:`ConnectionFailed` when the deadline passes first, and
        :class:`Stopped` when ``stopped()`` turns true between tries."""
        if json_body is not None and body is None:
            body = BytesBody(dumps(json_body))
        limit = time.monotonic() + (self.policy.deadline if deadline is None else deadline)
        all_headers = _headers(self.key, headers)
        if body is not None:
            all_headers["Content-Type"] = body.content_type
        tries = 0
        while True:
            tries += 1
            retry_after: float | None = None
            error: Exception
            try:
                response = self.client.request(
                    method,
                    path,
                    content=None if body is None else body.for_try(tries),
                    params=params,
                    headers=all_headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as e:
                error = ConnectionFailed(method, path, e)
                error.__cause__ = e
            else:
                self.clock.observe(response)
                if not is_retryable_status(response.status_code, response.headers, retry_409):
                    return response
                error = api_error(response)
                retry_after = parse_retry_after(response.headers.get("retry-after"))
            if stopped is not None and stopped():
                raise Stopped() from error
            wait = self.policy.backoff(tries, retry_after)
            if time.monotonic() + wait > limit:
                raise error
            log.debug("%s %s: try %d failed (%s); again in %.2fs", method, path, tries, error, wait)
            pause(wait)
            if stopped is not None and stopped():
                raise Stopped() from error


class AsyncSender:
    """Sends calls with retries through one pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        key: str,
        policy: RetryPolicy,
        clock: ServerClock | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.policy = policy
        self.clock = clock or ServerClock()

    async def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        body: AsyncBody | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float | None = None,
        deadline: float | None = None,
        retry_409: bool = False,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> httpx.Response:
        """As :meth:`SyncSender.send`."""
        if json_body is not None and body is None:
            body = BytesBody(dumps(json_body))
        limit = time.monotonic() + (self.policy.deadline if deadline is None else deadline)
        all_headers = _headers(self.key, headers)
        if body is not None:
            all_headers["Content-Type"] = body.content_type
        tries = 0
        while True:
            tries += 1
            retry_after: float | None = None
            error: Exception
            try:
                response = await self.client.request(
                    method,
                    path,
                    content=None if body is None else body.for_try_async(tries),
                    params=params,
                    headers=all_headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as e:
                error = ConnectionFailed(method, path, e)
                error.__cause__ = e
            else:
                self.clock.observe(response)
                if not is_retryable_status(response.status_code, response.headers, retry_409):
                    return response
                error = api_error(response)
                retry_after = parse_retry_after(response.headers.get("retry-after"))
            wait = self.policy.backoff(tries, retry_after)
            if time.monotonic() + wait > limit:
                raise error
            log.debug("%s %s: try %d failed (%s); again in %.2fs", method, path, tries, error, wait)
            await pause(wait)


def dumps(value: Any) -> bytes:
    import json

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


# --- Aborting a blocked long poll (sync) -----------------------------------
#
# A sync worker's lease waits up to 30 s for an attempt. When the worker
# stops, that wait must end at once: otherwise Receipt could lease it
# attempts it will never run (each would lapse, and count). A blocked
# socket read cannot be interrupted from Python, but the socket can be
# shut down under it; the network backend below remembers which socket
# each thread is reading, so `stop()` can do that for the leasing thread.


class _TrackedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, tracker: AbortTracker) -> None:
        self._inner = inner
        self._tracker = tracker

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._tracker.using(self):
            return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with self._tracker.using(self):
            self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _TrackedStream(
            self._inner.start_tls(ssl_context, server_hostname, timeout), self._tracker
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shutdown(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _TrackingBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend, tracker: AbortTracker) -> None:
        self._inner = inner
        self._tracker = tracker

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        return _TrackedStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options),
            self._tracker,
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return _TrackedStream(
            self._inner.connect_unix_socket(path, timeout, socket_options), self._tracker
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AbortTracker:
    """Lets one thread's network I/O be cut from another thread or from a
    signal handler: :meth:`abort` shuts the socket that thread is using
    down, and any I/O it starts afterwards fails at once. It takes no lock
    (a signal handler must not), only single dict and set operations."""

    def __init__(self) -> None:
        self._current: dict[int, _TrackedStream] = {}
        self._aborted: set[int] = set()
        self.installed = False

    def install(self, transport: httpx.HTTPTransport) -> bool:
        """Wraps the transport's network backend; False (and nothing done)
        when this httpx's transport is not laid out as expected."""
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is None or not isinstance(backend, httpcore.NetworkBackend):
            return False
        pool._network_backend = _TrackingBackend(backend, self)
        self.installed = True
        return True

    def using(self, stream: _TrackedStream) -> _Using:
        return _Using(self, stream)

    def abort(self, thread_id: int) -> None:
        # Marked first, looked up second; `_Using` does the reverse, so
        # whatever the interleaving, the I/O fails or its socket is shut.
        self._aborted.add(thread_id)
        stream = self._current.get(thread_id)
        if stream is not None:
            stream.shutdown()

    def reset(self, thread_id: int) -> None:
        self._aborted.discard(thread_id)


class _Using:
    def __init__(self, tracker: AbortTracker, stream: _TrackedStream) -> None:
        self.tracker = tracker
        self.stream = stream
        self.thread_id = threading.get_ident()

    def __enter__(self) -> None:
        self.tracker._current[self.thread_id] = self.stream
        if self.thread_id in self.tracker._aborted:
            self.tracker._current.pop(self.thread_id, None)
            raise httpcore.ReadError("aborted: the worker is stopping")

    def __exit__(self, *exc: object) -> None:
        self.tracker._current.pop(self.thread_id, None)
