from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from support import ApiServer


@pytest.fixture(autouse=True)
def _sdk_logs() -> None:
    logging.getLogger("receipt_worker").setLevel(logging.DEBUG)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


@pytest.fixture
def cleanup() -> Iterator[ExitStack]:
    """Everything a test starts is stopped here, in reverse order, even
    when the test fails."""
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def start_api(tmp_path: Path, cleanup: ExitStack) -> Callable[..., ApiServer]:
    """Starts the real api in a temp dir of its own; stopped at teardown."""
    count = 0

    def start(**env: Any) -> ApiServer:
        nonlocal count
        count += 1
        server = ApiServer(tmp_path / f"api-{count}", {k: str(v) for k, v in env.items()})
        server.start()
        cleanup.callback(server.stop)
        return server

    return start
