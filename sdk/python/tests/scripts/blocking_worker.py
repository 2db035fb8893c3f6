"""A worker whose handler writes its attempt's token to $TOKEN_FILE and
then blocks for ever (until the process is killed)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from receipt_worker import Attempt, Worker

logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(threadName)s %(message)s")
logging.getLogger("httpcore").setLevel(logging.WARNING)

worker = Worker(
    os.environ["RECEIPT_URL"],
    os.environ["RECEIPT_WORKER_KEY"],
    name="doomed",
    # One slot: while the handler runs, no lease is waiting in the api for
    # another attempt (a lease whose client died can still take one).
    concurrency=1,
)


@worker.kind(os.environ["KIND"])
def block(attempt: Attempt) -> dict[str, str]:
    # Sent with the first heartbeat, which takes the lease up: the test
    # waits for it, so the attempt killed is one that had started.
    attempt.progress(0.25)
    token_file = Path(os.environ["TOKEN_FILE"])
    partial = token_file.with_suffix(".partial")
    partial.write_text(attempt.token)
    partial.rename(token_file)  # appears whole
    while True:
        time.sleep(1)


worker.run()
