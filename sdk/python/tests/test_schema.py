"""(g) A submit whose parameters fail the kind's schema is a 422 naming the
field, and stores no job."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import pytest

from receipt_worker import ApiError, Client

from support import ApiServer

KIND = "sales-export"
SCHEMA = {
    "type": "object",
    "properties": {
        "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
        "region": {"enum": ["north", "south"]},
    },
    "required": ["month"],
    "additionalProperties": False,
}


def test_params_the_schema_refuses_are_a_422_naming_the_field_and_store_nothing(
    start_api: Callable[..., ApiServer], cleanup: ExitStack
) -> None:
    api = start_api()
    client = Client(api.url, api.key)
    cleanup.callback(client.close)
    kind = client.register_kind(KIND, params_schema=SCHEMA, timeout_secs=60)
    assert kind["name"] == KIND and kind["builtin"] is False

    with pytest.raises(ApiError) as refused:
        client.submit(KIND, {"month": "October"}, idempotency_key="bad-month")
    assert refused.value.status == 422
    assert refused.value.type == "/problems/validation-error"
    assert refused.value.problem.fields == ["month"], refused.value.errors

    with pytest.raises(ApiError) as refused:
        client.submit(KIND, {"month": "2026-10", "region": "east"})
    assert refused.value.status == 422
    assert "region" in refused.value.problem.fields, refused.value.errors

    assert client.jobs()["data"] == []
    assert client.jobs(kind=KIND)["data"] == []

    # The same key, corrected, makes the job: the refusal stored nothing.
    job = client.submit(KIND, {"month": "2026-10"}, idempotency_key="bad-month")
    assert job["status"] == "QUEUED"
    assert [j["job_id"] for j in client.jobs()["data"]] == [job["job_id"]]
