"""Exceptions: the ones a handler raises to say how its attempt ended, and
the ones the SDK raises when Receipt refuses a call or cannot be reached."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ApiError",
    "Cancelled",
    "ConnectionFailed",
    "Permanent",
    "Problem",
    "ReceiptError",
    "Retryable",
]


class Retryable(Exception):
    """Raise from a handler: the attempt failed, and another attempt may
    succeed. Receipt queues the job again after a backoff while it has
    attempts left (the kind's ``max_attempts``); the last one ends FAILED.

    ``error_type`` becomes the job's ``error.type`` (1 to 64 letters,
    digits, ``.``, ``_`` or ``-``; anything else is replaced by ``_``) and
    ``message`` its ``error.message`` (at most 4096 characters)."""

    retryable: bool = True
    default_error_type: str = "error"

    def __init__(self, message: str = "", *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type or self.default_error_type


class Permanent(Retryable):
    """Raise from a handler: the attempt failed for good; the job ends
    FAILED without another attempt (parameters that can never work, a
    report that does not exist...)."""

    retryable = False


class Cancelled(Exception):
    """Raised by :meth:`Attempt.check_cancel` and :meth:`Attempt.sleep` once
    the attempt must stop. ``reason`` says why:

    - ``"cancel_requested"``: a client cancelled the job; let it propagate
      and the SDK reports the attempt ``cancelled`` (the job ends CANCELLED);
    - ``"lost"``: the lease was lost (another attempt holds the job, or it
      ended); nothing is reported;
    - ``"timeout"``: the attempt passed its deadline; the SDK has already
      reported it as a retryable ``timeout``;
    - ``"shutdown"``: the worker's shutdown grace ran out; nothing is
      reported, the lease lapses and the job runs again elsewhere.
    """

    def __init__(self, reason: str = "cancel_requested") -> None:
        super().__init__(f"the attempt must stop: {reason}")
        self.reason = reason


class ReceiptError(Exception):
    """Base of the errors the SDK raises about its calls to Receipt."""


@dataclass(frozen=True)
class Problem:
    """An ``application/problem+json`` document (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_body(cls, status: int, body: Any, text: str = "") -> Problem:
        if not isinstance(body, dict):
            return cls(
                type="/problems/http-error",
                title="",
                status=status,
                detail=text[:500],
            )
        errors = body.get("errors")
        return cls(
            type=str(body.get("type", "/problems/http-error")),
            title=str(body.get("title", "")),
            status=int(body.get("status", status)),
            detail=str(body.get("detail", "")),
            errors=[e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else [],
            raw=body,
        )

    @property
    def fields(self) -> list[str]:
        """The ``field`` of each entry of ``errors`` (a 422's failing fields)."""
        return [str(e.get("field", "")) for e in self.errors]


class ApiError(ReceiptError):
    """Receipt answered with an error status; ``problem`` is its document."""

    def __init__(
        self,
        method: str,
        url: str,
        problem: Problem,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{method} {url}: {problem.status} {problem.type}: {problem.detail}")
        self.method = method
        self.url = url
        self.problem = problem
        self.retry_after = retry_after

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def type(self) -> str:
        return self.problem.type

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.problem.errors


class ConnectionFailed(ReceiptError):
    """Receipt could not be reached (or its answer was lost) on every try
    of a call; ``__cause__`` is the last try's transport error."""

    def __init__(self, method: str, url: str, error: BaseException) -> None:
        super().__init__(f"{method} {url}: {type(error).__name__}: {error}")
        self.method = method
        self.url = url
