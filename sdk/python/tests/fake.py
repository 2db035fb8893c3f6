"""A fake Receipt behind ``httpx.MockTransport``, for the unit tests of
what the real service cannot be made to do on cue (a heartbeat's 409, a
deadline, a 503 on a complete, a refused result)."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

ATTEMPT_PATH = re.compile(r"^/v1/work/attempts/([^/]+)/(heartbeat|complete|fail|cancelled)$")


def rfc3339(seconds_from_now: float) -> str:
    when = datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Call:
    action: str  # lease, heartbeat, complete, fail, cancelled
    token: str
    body: bytes
    headers: httpx.Headers
    at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        import json

        return json.loads(self.body)


Hook = Callable[[Call], "httpx.Response | None"]


@dataclass
class FakeReceipt:
    lease_secs: float = 2.0
    pending: list[dict[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    hooks: dict[str, Hook] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The bodies of the batches of reports, and whether to refuse them
    # all (as an api without the route would).
    batches: list[bytes] = field(default_factory=list)
    refuse_batches: bool = False

    def add(
        self,
        params: Any = None,
        *,
        job: str = "job_0",
        attempt: int = 1,
        kind: str = "export",
        deadline_secs: float = 60.0,
        traceparent: str | None = None,
    ) -> str:
        token = f"{job}.{attempt}"
        item: dict[str, Any] = {
            "token": token,
            "job_id": job,
            "kind": kind,
            "attempt": attempt,
            "max_attempts": 5,
            "params": params if params is not None else {},
            "priority": "normal",
            "lease_expires_at": rfc3339(self.lease_secs),
            "deadline": rfc3339(deadline_secs),
        }
        if traceparent:
            item["traceparent"] = traceparent
        with self.lock:
            self.pending.append(item)
        return token

    def handle(self, request: httpx.Request, *, idle_wait: bool = True) -> httpx.Response:
        body = request.read()
        path = request.url.path
        if path == "/v1/work/reports":
            return self.handle_reports(request, body)
        if path == "/v1/work/lease":
            call = Call("lease", "", body, request.headers)
        else:
            m = ATTEMPT_PATH.match(path)
            if not m:
                return httpx.Response(404, json={"type": "/problems/not-found", "status": 404})
            call = Call(m.group(2), m.group(1), body, request.headers)
        with self.lock:
            self.calls.append(call)
        hook = self.hooks.get(call.action)
        if hook is not None:
            answer = hook(call)
            if answer is not None:
                return answer
        if call.action == "lease":
            most = int(call.json().get("max", 1))
            with self.lock:
                taken, self.pending = self.pending[:most], self.pending[most:]
            if not taken and idle_wait:
                time.sleep(0.02)  # a (very) short long poll
            return httpx.Response(200, json={"attempts": taken})
        job = call.token.rsplit(".", 1)[0]
        if call.action == "heartbeat":
            return httpx.Response(
                200,
                json={
                    "cancel_requested": False,
                    "lease_expires_at": rfc3339(self.lease_secs),
                    "deadline": rfc3339(60),
                },
            )
        status = {"complete": "SUCCEEDED", "fail": "QUEUED", "cancelled": "CANCELLED"}
        return httpx.Response(200, json={"job_id": job, "status": status[call.action]})

    def handle_reports(self, request: httpx.Request, body: bytes) -> httpx.Response:
        """A batch of reports, each taken as its own call (a hook answers
        it): a hook's answer worth a retry (a 5xx, a 408, a 429) answers
        the whole batch, as Receipt's outage would."""
        import json

        self.batches.append(body)
        if self.refuse_batches:
            return httpx.Response(404, json={"type": "/problems/not-found", "status": 404})
        answers = []
        for item in json.loads(body)["reports"]:
            what, token = item.pop("outcome"), item.pop("token")
            headers = httpx.Headers(request.headers)
            traceparent = item.pop("traceparent", None)
            if traceparent:
                headers["traceparent"] = traceparent
            if what == "complete":
                one = json.dumps(item["result"]).encode()
            else:
                one = json.dumps(item).encode() if item else b""
            answer = self.handle(
                httpx.Request(
                    "POST", f"/v1/work/attempts/{token}/{what}", headers=headers, content=one
                )
            )
            if answer.status_code in (408, 429) or answer.status_code >= 500:
                return answer
            answers.append({"token": token, "status": answer.status_code, "body": answer.json()})
        return httpx.Response(200, json={"reports": answers})

    def reports(self, token: str | None = None) -> list[Call]:
        with self.lock:
            return [
                c
                for c in self.calls
                if c.action in ("complete", "fail", "cancelled")
                and (token is None or c.token == token)
            ]

    def beats(self, token: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.action == "heartbeat" and c.token == token]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def async_transport(self) -> httpx.MockTransport:
        """For an asyncio worker: its short long poll waits without holding
        up the loop (the attempts' timers and reports run meanwhile)."""

        async def handle(request: httpx.Request) -> httpx.Response:
            answer = self.handle(request, idle_wait=False)
            idle_lease = request.url.path == "/v1/work/lease" and answer.status_code == 200
            if idle_lease and not answer.json()["attempts"]:
                await asyncio.sleep(0.02)
            return answer

        return httpx.MockTransport(handle)


def problem(status: int, type_: str, detail: str = "", **headers: str) -> httpx.Response:
    return httpx.Response(
        status,
        json={"type": type_, "title": "", "status": status, "detail": detail},
        headers={"content-type": "application/problem+json", **headers},
    )


class SilentServer:
    """Accepts connections and reads requests, and never answers: a long
    poll that waits for ever."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self.sock.close()
        for conn in self.accepted:
            conn.close()
