"""The worked example of docs/workers.md (examples/sales_export.py): a
report read from the team's own SQLite database, as CSV and as XLSX."""

from __future__ import annotations

import csv
import io
import sqlite3
import zipfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx

from receipt_worker import Client

from support import ApiServer, kill_if_running, start_script, stop_process

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sales_export.py"


def the_sales_database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE sales (invoice TEXT, date TEXT, customer TEXT, amount REAL)")
        db.executemany(
            "INSERT INTO sales VALUES (?, ?, ?, ?)",
            [
                ("inv-2", "2026-10-05", "Globex", 250.0),
                ("inv-1", "2026-10-03", "Acme", 1299.0),
                ("inv-3", "2026-11-01", "Initech", 10.0),
            ],
        )


def test_the_worked_example_exports_a_month_as_csv_and_xlsx(
    start_api: Callable[..., ApiServer], tmp_path: Path, cleanup: ExitStack
) -> None:
    api = start_api()
    work_key = api.create_key(scope="work")
    database = tmp_path / "sales.db"
    the_sales_database(database)
    declaration = _declaration()

    env = {"RECEIPT_URL": api.url, "RECEIPT_WORKER_KEY": work_key, "SALES_DB": str(database)}
    worker = start_script(EXAMPLE, env, tmp_path / "worker.log")
    cleanup.callback(kill_if_running, worker)

    with Client(api.url, api.key) as client:
        client.register_kind("sales-export", **declaration)
        csv_job = client.submit("sales-export", {"month": "2026-10", "format": "csv"})
        xlsx_job = client.submit("sales-export", {"month": "2026-10", "format": "xlsx"})
        for job in (csv_job, xlsx_job):
            done = client.wait(job["job_id"], timeout=60)
            assert done["status"] == "SUCCEEDED", (done, (tmp_path / "worker.log").read_text())

    headers = {"Authorization": f"Bearer {api.key}"}
    got = httpx.get(f"{api.url}/v1/jobs/{csv_job['job_id']}/result", headers=headers)
    assert got.headers["content-type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(got.text)))
    assert rows == [
        ["invoice", "date", "customer", "amount"],
        ["inv-1", "2026-10-03", "Acme", "1299.00"],
        ["inv-2", "2026-10-05", "Globex", "250.00"],
    ]

    got = httpx.get(f"{api.url}/v1/jobs/{xlsx_job['job_id']}/result", headers=headers)
    assert got.headers["content-type"].startswith("application/vnd.openxmlformats")
    with zipfile.ZipFile(io.BytesIO(got.content)) as book:
        sheet = book.read("xl/worksheets/sheet1.xml").decode()
        strings = book.read("xl/sharedStrings.xml").decode()
    assert "Acme" in strings and "Globex" in strings and "Initech" not in strings
    assert "SUM(D2:D3)" in sheet and "1299" in sheet

    assert stop_process(worker, timeout=10) == 0, (tmp_path / "worker.log").read_text()


def _declaration() -> dict[str, object]:
    """The example's DECLARATION, read from its source without running its
    worker (which needs the environment)."""
    namespace: dict[str, object] = {}
    source = EXAMPLE.read_text()
    start = source.index("XLSX = ")
    end = source.index("COLUMNS = ")
    exec(source[start:end], namespace)  # noqa: S102  (the example's own constants)
    declaration = dict(namespace["DECLARATION"])  # type: ignore[call-overload]
    return declaration
