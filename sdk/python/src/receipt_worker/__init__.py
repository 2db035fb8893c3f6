"""Workers for Receipt's registered kinds, over HTTP.

::

    from receipt_worker import Worker, Retryable, Permanent

    worker = Worker(base_url, work_key, name="reports-1", concurrency=4)

    @worker.kind("sales-export")
    def sales_export(attempt):
        attempt.progress(0.5)
        return {"rows": 3}

    worker.run()

:class:`AsyncWorker` is the asyncio twin; :class:`Client` registers kinds
and submits jobs with a key of full rights.
"""

from ._http import RetryPolicy
from ._version import __version__
from .aio import AsyncHandler, AsyncWorker
from .attempt import Attempt
from .client import FINAL_STATUSES, Client
from .errors import (
    ApiError,
    Cancelled,
    ConnectionFailed,
    Permanent,
    Problem,
    ReceiptError,
    Retryable,
)
from .results import Result, Stream
from .worker import SyncHandler, Worker

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "AsyncHandler",
    "AsyncWorker",
    "Attempt",
    "Cancelled",
    "Client",
    "ConnectionFailed",
    "Permanent",
    "Problem",
    "ReceiptError",
    "Result",
    "RetryPolicy",
    "Retryable",
    "Stream",
    "SyncHandler",
    "Worker",
    "__version__",
]
