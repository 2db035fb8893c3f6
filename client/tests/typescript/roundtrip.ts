// A round trip through the TypeScript client a user generates from the
// served OpenAPI document (openapi-typescript makes `schema.d.ts`,
// openapi-fetch sends the requests): submit a job with an Idempotency-Key
// and submit it again, long-poll it until it is final, fetch its result,
// and read the problems of a missing job (404) and of invalid parameters
// (422) through their typed `Problem`.
//
// Usage: node out/roundtrip.js BASE_URL API_KEY. Exits non-zero on the
// first failed check.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

// The two members of Node's `process` this script uses, without pulling
// in Node's whole type package.
declare const process: { argv: string[]; exit(code: number): never };

type Job = components["schemas"]["JobObject"];
type Problem = components["schemas"]["Problem"];

function check(condition: boolean, message: string): asserts condition {
  if (!condition) {
    console.error(`FAILED: ${message}`);
    process.exit(1);
  }
}

const FINAL: ReadonlyArray<Job["status"]> = ["SUCCEEDED", "FAILED", "CANCELLED"];

async function main(baseUrl: string, apiKey: string): Promise<void> {
  const client = createClient<paths>({
    baseUrl,
    headers: { Authorization: `Bearer ${apiKey}` },
  });
  const key = `roundtrip-${crypto.randomUUID()}`;
  const submit = () =>
    client.POST("/v1/reports/{kind}", {
      params: { path: { kind: "sleep" }, header: { "Idempotency-Key": key } },
      body: { ms: 200 },
    });

  const submitted = await submit();
  check(submitted.response.status === 202, `submit answered ${submitted.response.status}`);
  const job: Job | undefined = submitted.data;
  check(job !== undefined, "submit has no job");
  check(job.status === "QUEUED", `a new job is ${job.status}`);
  check(
    submitted.response.headers.get("location") === `/v1/jobs/${job.job_id}`,
    `Location is ${submitted.response.headers.get("location")}`,
  );

  const replayed = await submit();
  check(replayed.data?.job_id === job.job_id, "the retried submit made another job");
  check(
    replayed.response.headers.get("idempotent-replayed") === "true",
    "the retried submit is not marked Idempotent-Replayed",
  );

  let polled: Job = job;
  for (let i = 0; i < 6 && !FINAL.includes(polled.status); i++) {
    const answer = await client.GET("/v1/jobs/{job_id}", {
      params: { path: { job_id: job.job_id }, query: { wait: 10 } },
    });
    check(answer.data !== undefined, `the long poll answered ${answer.response.status}`);
    polled = answer.data;
  }
  check(polled.status === "SUCCEEDED", `the job ended ${polled.status}`);
  check(polled.result_url === `/v1/jobs/${job.job_id}/result`, `result_url is ${polled.result_url}`);

  const result = await client.GET("/v1/jobs/{job_id}/result", {
    params: { path: { job_id: job.job_id } },
  });
  check(result.response.status === 200, `the result answered ${result.response.status}`);
  const report = result.data as { slept_ms?: unknown } | undefined;
  check(report?.slept_ms === 200, `the result is ${JSON.stringify(result.data)}`);

  const missing = await client.GET("/v1/jobs/{job_id}", {
    params: { path: { job_id: "job_00000000000000000000000000000000" } },
  });
  const notFound: Problem | undefined = missing.error;
  check(missing.response.status === 404, `a missing job answered ${missing.response.status}`);
  check(notFound?.type === "/problems/not-found", `the 404's type is ${notFound?.type}`);
  check((notFound?.detail ?? "").length > 0, "the 404 has no detail");

  const invalid = await client.POST("/v1/reports/{kind}", {
    params: { path: { kind: "gst-summary" }, header: { "Idempotency-Key": `${key}-invalid` } },
    body: { month: "2026-13" },
  });
  const unprocessable: Problem | undefined = invalid.error;
  check(invalid.response.status === 422, `a bad month answered ${invalid.response.status}`);
  const fields = (unprocessable?.errors ?? []).map((error) => error.field);
  check(fields.includes("month"), `the 422 names ${JSON.stringify(fields)}`);

  console.log("round trip ok");
}

const [baseUrl, apiKey] = process.argv.slice(2);
check(baseUrl !== undefined && apiKey !== undefined, "usage: roundtrip.js BASE_URL API_KEY");
await main(baseUrl, apiKey);
