"""A worker pointed at $RECEIPT_URL (which never answers), for the signal
test: prints READY once its run() has begun, then runs until a signal."""

from __future__ import annotations

import logging
import os
import sys
import threading

from receipt_worker import AsyncWorker, Attempt, Worker

logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(threadName)s %(message)s")
logging.getLogger("httpcore").setLevel(logging.WARNING)

flavour = sys.argv[1]
url, key = os.environ["RECEIPT_URL"], "rk_test"


def ready() -> None:
    print("READY", flush=True)


if flavour == "sync":
    worker = Worker(url, key, name="silent")

    @worker.kind("anything")
    def handle(attempt: Attempt) -> None:
        return None

    threading.Timer(0.3, ready).start()
    worker.run()
else:
    import asyncio

    aworker = AsyncWorker(url, key, name="silent")

    @aworker.kind("anything")
    async def ahandle(attempt: Attempt) -> None:
        return None

    async def main() -> None:
        asyncio.get_running_loop().call_later(0.3, ready)
        await aworker.run()

    asyncio.run(main())
print("EXITED", flush=True)
