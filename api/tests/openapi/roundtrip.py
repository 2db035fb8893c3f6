"""A round trip through a client generated from the served OpenAPI document
by openapi-python-client: submit a job with an Idempotency-Key, long-poll it
until it is final, fetch its result, and read the problems of a missing job
(404) and of invalid parameters (422) through the client's parsed models.

Usage: roundtrip.py BASE_URL API_KEY (with the generated package
`receipt_client` on PYTHONPATH). Exits non-zero on the first failed check.
"""

import sys
import uuid

import httpx
from receipt_client import AuthenticatedClient
from receipt_client.api.jobs import get_job, get_job_result, submit_report
from receipt_client.models import JobObject, JobStatus, Problem, SleepParams

FINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main(base_url, api_key):
    client = AuthenticatedClient(
        base_url=base_url, token=api_key, timeout=httpx.Timeout(70.0)
    )
    key = f"roundtrip-{uuid.uuid4()}"

    submitted = submit_report.sync_detailed(
        "sleep", client=client, body=SleepParams(ms=200), idempotency_key=key
    )
    check(submitted.status_code == 202, f"submit answered {submitted.status_code}: {submitted.content!r}")
    job = submitted.parsed
    check(isinstance(job, JobObject), f"submit parsed as {type(job).__name__}")
    check(job.status == JobStatus.QUEUED, f"a new job is {job.status}")
    check(
        submitted.headers.get("location") == f"/v1/jobs/{job.job_id}",
        f"Location is {submitted.headers.get('location')!r}",
    )

    replayed = submit_report.sync_detailed(
        "sleep", client=client, body=SleepParams(ms=200), idempotency_key=key
    )
    check(replayed.status_code == 202, f"the retried submit answered {replayed.status_code}")
    check(replayed.parsed.job_id == job.job_id, "the retried submit made another job")
    check(
        replayed.headers.get("idempotent-replayed") == "true",
        "the retried submit is not marked Idempotent-Replayed",
    )

    for _ in range(6):
        polled = get_job.sync_detailed(job.job_id, client=client, wait=10)
        check(polled.status_code == 200, f"the long poll answered {polled.status_code}")
        check(isinstance(polled.parsed, JobObject), "the long poll is not a job object")
        if polled.parsed.status in FINAL:
            break
    check(polled.parsed.status == JobStatus.SUCCEEDED, f"the job ended {polled.parsed.status}")
    check(polled.parsed.result_url == f"/v1/jobs/{job.job_id}/result", "no result_url")

    result = get_job_result.sync_detailed(job.job_id, client=client)
    check(result.status_code == 200, f"the result answered {result.status_code}")
    report = result.parsed.to_dict()
    check(report.get("slept_ms") == 200, f"the result is {report}")

    missing = "job_" + "0" * 32
    not_found = get_job.sync_detailed(missing, client=client)
    check(not_found.status_code == 404, f"a missing job answered {not_found.status_code}")
    check(isinstance(not_found.parsed, Problem), "the 404 is not parsed as a Problem")
    check(missing in not_found.parsed.detail, f"the 404's detail is {not_found.parsed.detail!r}")
    check(not_found.parsed.type_ == "/problems/not-found", f"the 404's type is {not_found.parsed.type_!r}")

    invalid = submit_report.sync_detailed(
        "sleep", client=client, body=SleepParams(ms=-1)
    )
    check(invalid.status_code == 422, f"ms = -1 answered {invalid.status_code}")
    check(isinstance(invalid.parsed, Problem), "the 422 is not parsed as a Problem")
    fields = [error.field for error in invalid.parsed.errors]
    check(fields == ["ms"], f"the 422 names {fields}")

    print(f"round trip ok: {job.job_id}; 404 detail: {not_found.parsed.detail}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
