"""The external scenario's worker (bench/src/external.rs): Receipt's
Python SDK running no-op jobs of the registered kind `noop`, its slots
set by CONCURRENCY."""

import asyncio
import os

from receipt_worker import AsyncWorker

worker = AsyncWorker(
    os.environ["RECEIPT_URL"],
    os.environ["RECEIPT_WORKER_KEY"],
    name="bench-python",
    concurrency=int(os.environ.get("CONCURRENCY", "16")),
)


@worker.kind("noop")
async def noop(attempt):
    return {}


asyncio.run(worker.run())
