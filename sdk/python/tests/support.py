"""What the integration tests share: the real api, started as a user
would (embedded, SQLite, one process), keys made with its command line,
a webhook receiver, a proxy that loses one answer, and waiting for
events with deadlines."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
API_BIN = Path(os.environ.get("RECEIPT_API_BIN", str(REPO / "target" / "debug" / "api")))

T = TypeVar("T")


def wait_until(
    what: str, check: Callable[[], T], timeout: float = 20.0, interval: float = 0.05
) -> T:
    """Polls ``check`` until it answers something truthy, which it returns;
    fails naming ``what`` (and the last answer) after ``timeout``."""
    until = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= until:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def stays_true(what: str, check: Callable[[], bool], seconds: float) -> None:
    """Checks ``check`` for ``seconds``: that nothing more happens (a second
    delivery, say) in a window the event would have used."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert check(), f"{what} stopped being true"
        time.sleep(0.05)


BASE_ENV = {
    "BIND_ADDR": "127.0.0.1:0",
    "EMBEDDED_WORKER": "true",
    "JOB_LEASE": "2s",
    "RETRY_BASE_DELAY": "50ms",
    "RETRY_MAX_DELAY": "200ms",
    "SHUTDOWN_GRACE": "2s",
    "RUST_LOG": "warn",
    "WEBHOOK_ALLOW_PRIVATE": "true",
}

KEY_LINE = re.compile(r"API key: (rk_[0-9a-f]+)")
LISTEN_LINE = re.compile(r"listening on (http://\S+)")


class ApiServer:
    """The api binary in a temp dir of its own."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        if not API_BIN.exists():
            raise AssertionError(f"no api binary at {API_BIN}: build it, or set RECEIPT_API_BIN")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k != "API_KEYS" and not k.startswith(("OTEL_", "RECEIPT_", "MAX_"))
        }
        self.env.update(BASE_ENV)
        self.env["DATABASE_URL"] = f"sqlite://{workdir}/jobs.db"
        self.env.update(env or {})
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.key = ""
        self._lines: queue.Queue[str | None] = queue.Queue()

    def start(self, timeout: float = 60.0) -> ApiServer:
        self.stderr = open(self.workdir / "api.stderr", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(API_BIN)],
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        until = time.monotonic() + timeout
        while not (self.url and self.key):
            left = until - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.01, left))
            except queue.Empty:
                line = None
            if line is None or left <= 0:
                self.stop()
                raise AssertionError(
                    f"the api did not start (key {bool(self.key)}, url {self.url!r}); stderr:\n"
                    + (self.workdir / "api.stderr").read_text(errors="replace")[-4000:]
                )
            if m := KEY_LINE.search(line):
                self.key = m.group(1)
            if m := LISTEN_LINE.search(line):
                self.url = m.group(1).rstrip("/")
        return self

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.workdir / "api.stdout", "w") as copy:
            for line in self.process.stdout:
                copy.write(line)
                copy.flush()
                self._lines.put(line)
        self._lines.put(None)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def create_key(
        self, tenant: str = "default", scope: str | None = None, kinds: list[str] | None = None
    ) -> str:
        """A new key made by ``api keys create``, once the server knows it."""
        args = [str(API_BIN), "keys", "create", "--tenant", tenant]
        if scope:
            args += ["--scope", scope]
        if kinds:
            args += ["--kinds", ",".join(kinds)]
        made = subprocess.run(
            args, env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=30
        )
        m = KEY_LINE.search(made.stdout)
        assert made.returncode == 0 and m, f"keys create failed: {made.stdout}\n{made.stderr}"
        key = m.group(1)
        self.wait_key_known(key, work=scope == "work")
        return key

    def wait_key_known(self, key: str, work: bool) -> None:
        headers = {"Authorization": f"Bearer {key}"}

        def known() -> bool:
            if work:
                # A kind never registered: 422 (or 403), never a lease.
                r = httpx.post(
                    f"{self.url}/v1/work/lease",
                    headers=headers,
                    json={"worker": "probe", "kinds": ["zz-never-registered"], "wait_secs": 0},
                )
            else:
                r = httpx.get(f"{self.url}/v1/jobs?limit=1", headers=headers)
            return r.status_code != 401

        wait_until("the api to know the new key", known, timeout=10)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.process = None
        self.stderr.close()


# --- a webhook receiver ------------------------------------------------------


@dataclass
class Delivery:
    webhook_id: str
    body: dict[str, Any]


@dataclass
class WebhookReceiver:
    deliveries: list[Delivery] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver.lock:
                    receiver.deliveries.append(Delivery(self.headers.get("webhook-id", ""), body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def of_type(self, event_type: str) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.body.get("type") == event_type]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- a proxy that loses the answer of the first complete -------------------


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def _read_body(reader: asyncio.StreamReader, head: bytes, response: bool) -> bytes:
    if response:
        status = int(head.split(b" ", 2)[1])
        if status in (204, 304) or 100 <= status < 200:
            return b""
    length = _header(head, b"content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        body = b""
        while True:
            line = await reader.readuntil(b"\r\n")
            body += line
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:
                    trailer = await reader.readuntil(b"\r\n")
                    body += trailer
                    if trailer == b"\r\n":
                        return body
            body += await reader.readexactly(size + 2)
    return b""


def body_of(message: bytes) -> bytes:
    """The body of an HTTP/1.1 message, its chunked coding undone."""
    head, _, body = message.partition(b"\r\n\r\n")
    if (_header(head + b"\r\n", b"transfer-encoding") or b"").lower() != b"chunked":
        return body
    data = b""
    while True:
        line, _, body = body.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return data
        data, body = data + body[:size], body[size + 2 :]


class DropFirstCompleteAnswer:
    """A TCP proxy in front of the api that forwards every request and its
    answer, except that for the first complete (a path with ``/complete``,
    or a batch of reports) it forwards the request, reads the api's
    answer, and closes the client's connection without sending it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.dropped: list[tuple[bytes, bytes]] = []  # (request, the answer it lost)
        self.completes_answered: list[tuple[bytes, bytes]] = []  # (request, answer sent)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> DropFirstCompleteAnswer:
        self._thread.start()
        assert self._ready.wait(10), "the proxy did not start"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._stopped = asyncio.Event()
        self._ready.set()
        async with server:
            await self._stopped.wait()
            # Connections still open (a long poll the api holds) end here.
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            while True:
                head = await _read_head(reader)
                if head is None:
                    return
                request = head + await _read_body(reader, head, response=False)
                path = head.split(b" ", 2)[1]
                up_writer.write(request)
                await up_writer.drain()
                answer_head = await _read_head(up_reader)
                if answer_head is None:
                    return
                answer = answer_head + await _read_body(up_reader, answer_head, response=True)
                completes = b"/complete" in path or path == b"/v1/work/reports"
                if completes:
                    with self._lock:
                        drop = not self.dropped
                        if drop:
                            self.dropped.append((request, answer))
                    if drop:
                        return  # close the worker's connection: the answer is lost
                writer.write(answer)
                await writer.drain()
                if completes:
                    with self._lock:
                        self.completes_answered.append((request, answer))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # the proxy stops (a cancelled connection ends quietly)
        finally:
            writer.close()
            up_writer.close()

    def stop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)


# --- workers in subprocesses and threads -----------------------------------


def start_script(
    script: Path, env: dict[str, str], log_path: Path, args: list[str] | None = None
) -> subprocess.Popen[bytes]:
    full_env = dict(os.environ)
    full_env.update(env)
    with open(log_path, "wb") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, str(script), *(args or [])],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def kill_if_running(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def stop_process(process: subprocess.Popen[Any], timeout: float = 15.0) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
            raise
    return process.returncode


class InThread:
    """Runs a worker's ``run()`` in a thread; :meth:`stop` stops and joins it."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            run = self.worker.run()
            if asyncio.iscoroutine(run):
                asyncio.run(run)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def start(self) -> InThread:
        self.thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        if self.error is not None:
            raise self.error


def readme_example(name: str) -> str:
    """The code block of README.md marked ``<!-- example: name -->``."""
    text = (HERE.parent / "README.md").read_text()
    marker = f"<!-- example: {name} -->"
    assert marker in text, f"README.md has no example {name}"
    after = text.split(marker, 1)[1]
    block = re.search(r"```python\n(.*?)```", after, re.S)
    assert block is not None
    return block.group(1)
