"""A small client for the calls around a worker, with a key of full
rights: register a kind, submit jobs, read, wait for and cancel them,
register a webhook. Every call is tried again as the workers' are, and a
``POST`` sends one ``Idempotency-Key`` on all its tries, so a retry never
makes a second job."""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from ._http import RetryPolicy, SyncSender, api_error

__all__ = ["Client", "FINAL_STATUSES"]

FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
MOST_WAIT = 60


class Client:
    """``Client(base_url, key)``; use it as a context manager, or call
    :meth:`close`. Refusals raise :class:`~receipt_worker.ApiError` (its
    ``problem`` has ``type``, ``detail`` and a 422's ``errors``); a
    service that cannot be reached until the retry policy's deadline
    raises :class:`~receipt_worker.ConnectionFailed`."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=10.0),
        )
        self._sender = SyncSender(self._http, key, retry or RetryPolicy())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- any call ----------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """Any call, with retries; a ``POST`` gets an ``Idempotency-Key``
        (``idempotency_key``, or a new one for all its tries). Answers the
        response whatever its status (after the retries)."""
        all_headers = dict(headers or {})
        if method.upper() == "POST":
            all_headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        return self._sender.send(
            method.upper(),
            path,
            json_body=json,
            params=params,
            headers=all_headers,
            timeout=timeout,
            retry_409=True,
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise api_error(response)
        if not response.content:
            return None
        return response.json()

    # -- kinds -------------------------------------------------------------
    def register_kind(
        self,
        name: str,
        *,
        params_schema: dict[str, Any],
        timeout_secs: int,
        max_attempts: int | None = None,
        result_media_types: list[str] | None = None,
        max_running: int | None = None,
        priority: str | None = None,
        about: str | None = None,
    ) -> dict[str, Any]:
        """``PUT /v1/kinds/{name}``: registers the kind, or changes it; the
        same declaration again changes nothing. Answers the kind object."""
        body: dict[str, Any] = {"params_schema": params_schema, "timeout_secs": timeout_secs}
        optional = {
            "max_attempts": max_attempts,
            "result_media_types": result_media_types,
            "max_running": max_running,
            "priority": priority,
            "about": about,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        result: dict[str, Any] = self._json("PUT", f"/v1/kinds/{quote(name, safe='')}", json=body)
        return result

    def delete_kind(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("DELETE", f"/v1/kinds/{quote(name, safe='')}")
        return result

    # -- jobs --------------------------------------------------------------
    def submit(
        self,
        kind: str,
        params: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        priority: str | None = None,
        delay: int | None = None,
        run_at: str | None = None,
        traceparent: str | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/reports/{kind}``: answers the job object (202). Give
        ``idempotency_key`` when the intent must survive a restart of your
        program; otherwise one is made for this call's tries."""
        query: dict[str, str] = {}
        if priority is not None:
            query["priority"] = priority
        if delay is not None:
            query["delay"] = str(delay)
        if run_at is not None:
            query["run_at"] = run_at
        headers = {"traceparent": traceparent} if traceparent else None
        result: dict[str, Any] = self._json(
            "POST",
            f"/v1/reports/{quote(kind, safe='')}",
            json=params,
            params=query or None,
            headers=headers,
            idempotency_key=idempotency_key,
        )
        return result

    def job(self, job_id: str, *, wait: int | None = None) -> dict[str, Any]:
        """``GET /v1/jobs/{job_id}``; with ``wait``, held open until the job
        is final or ``wait`` seconds (at most 60) pass."""
        params = None if wait is None else {"wait": str(max(0, min(MOST_WAIT, wait)))}
        timeout = None if wait is None else float(wait) + 15.0
        result: dict[str, Any] = self._json(
            "GET", f"/v1/jobs/{quote(job_id, safe='')}", params=params, timeout=timeout
        )
        return result

    def wait(self, job_id: str, timeout: float = 300.0) -> dict[str, Any]:
        """Long-polls the job until it is final; raises ``TimeoutError``
        (with the job as last seen) when ``timeout`` seconds pass first."""
        until = time.monotonic() + timeout
        while True:
            left = until - time.monotonic()
            job = self.job(job_id, wait=max(0, min(MOST_WAIT, int(left))))
            if job.get("status") in FINAL_STATUSES:
                return job
            if time.monotonic() >= until:
                raise TimeoutError(f"job {job_id} is still {job.get('status')}: {job}")

    def jobs(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v1/jobs``: one page, ``{"data": [...], "next_cursor"}``."""
        query = {
            k: str(v)
            for k, v in {"status": status, "kind": kind, "limit": limit, "cursor": cursor}.items()
            if v is not None
        }
        result: dict[str, Any] = self._json("GET", "/v1/jobs", params=query or None)
        return result

    def result(self, job_id: str) -> Any:
        """``GET /v1/jobs/{job_id}/result``: the JSON result decoded, or
        the bytes of a result of another media type."""
        response = self.result_response(job_id)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.content

    def result_response(self, job_id: str) -> httpx.Response:
        response = self.request("GET", f"/v1/jobs/{quote(job_id, safe='')}/result")
        if response.status_code >= 400:
            raise api_error(response)
        return response

    def cancel(self, job_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``POST /v1/jobs/{job_id}/cancel``: answers the job object."""
        result: dict[str, Any] = self._json(
            "POST", f"/v1/jobs/{quote(job_id, safe='')}/cancel", idempotency_key=idempotency_key
        )
        return result

    # -- webhooks ----------------------------------------------------------
    def register_webhook(
        self,
        url: str,
        *,
        events: list[str] | None = None,
        job_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/webhooks``: answers the webhook with its ``secret``
        (shown only here)."""
        body: dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = events
        if job_id is not None:
            body["job_id"] = job_id
        result: dict[str, Any] = self._json(
            "POST", "/v1/webhooks", json=body, idempotency_key=idempotency_key
        )
        return result

    def webhook_deliveries(self, webhook_id: str) -> dict[str, Any]:
        """``GET /v1/webhooks/{id}/deliveries``: one page, newest first."""
        result: dict[str, Any] = self._json(
            "GET", f"/v1/webhooks/{quote(webhook_id, safe='')}/deliveries"
        )
        return result
