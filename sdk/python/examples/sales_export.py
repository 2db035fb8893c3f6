"""A worked example: the month's sales from the team's own database, as CSV
or as an Excel workbook (XLSX), run by Receipt as the registered kind
`sales-export`.

Run it with:
    RECEIPT_URL=http://127.0.0.1:8080 RECEIPT_WORKER_KEY=rk_... \
    SALES_DB=sales.db python examples/sales_export.py

It reads a SQLite file (`sqlite3`, in Python itself); a Postgres database
is read the same way with a driver such as psycopg. The workbook is
written with XlsxWriter (`pip install XlsxWriter`).
"""

from __future__ import annotations

import csv
import io
import os
import sqlite3

import xlsxwriter

from receipt_worker import Permanent, Result, Worker

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

# The kind's declaration (PUT /v1/kinds/sales-export): the month, and the
# format of the result.
DECLARATION = {
    "about": "The month's sales, one row per invoice, as CSV or XLSX",
    "params_schema": {
        "type": "object",
        "properties": {
            "month": {"type": "string", "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])$"},
            "format": {"enum": ["csv", "xlsx"]},
        },
        "required": ["month", "format"],
        "additionalProperties": False,
    },
    "timeout_secs": 600,
    "result_media_types": ["text/csv", XLSX],
}

COLUMNS = ["invoice", "date", "customer", "amount"]


def read_sales(month: str) -> list[tuple[str, str, str, float]]:
    """The month's invoices, by date. A database that cannot be read is
    worth another attempt: the SDK retries the attempt for any exception
    but `Permanent`."""
    with sqlite3.connect(os.environ["SALES_DB"]) as db:
        return db.execute(
            "SELECT invoice, date, customer, amount FROM sales"
            " WHERE substr(date, 1, 7) = ? ORDER BY date, invoice",
            (month,),
        ).fetchall()


def as_csv(rows: list[tuple[str, str, str, float]]) -> Result:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows((invoice, date, customer, f"{amount:.2f}") for invoice, date, customer, amount in rows)
    return Result(text.getvalue(), "text/csv")


def as_xlsx(month: str, rows: list[tuple[str, str, str, float]]) -> Result:
    body = io.BytesIO()
    with xlsxwriter.Workbook(body, {"in_memory": True}) as book:
        sheet = book.add_worksheet(month)
        money = book.add_format({"num_format": "#,##0.00"})
        sheet.write_row(0, 0, COLUMNS)
        for line, (invoice, date, customer, amount) in enumerate(rows, start=1):
            sheet.write_row(line, 0, [invoice, date, customer])
            sheet.write_number(line, 3, amount, money)
        if rows:
            sheet.write_formula(len(rows) + 1, 3, f"=SUM(D2:D{len(rows) + 1})", money)
    return Result(body.getvalue(), XLSX)


worker = Worker(
    os.environ["RECEIPT_URL"],
    os.environ["RECEIPT_WORKER_KEY"],
    name=os.environ.get("WORKER_NAME", "sales-export-1"),
    concurrency=2,
)


@worker.kind("sales-export")
def sales_export(attempt):  # type: ignore[no-untyped-def]
    month, format = attempt.params["month"], attempt.params["format"]
    rows = read_sales(month)
    attempt.progress(0.5)
    if not rows and month > "2100-01":
        raise Permanent(f"{month} is too far ahead to have sales", error_type="no_such_month")
    return as_csv(rows) if format == "csv" else as_xlsx(month, rows)


if __name__ == "__main__":
    worker.run()  # until SIGTERM or Ctrl-C
