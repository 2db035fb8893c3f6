//! Kinds a tenant registers, run by its workers over HTTP: the contract
//! of `/v1/kinds` and `/v1/work/...` (`docs/workers.md`) against the real
//! binaries, on the embedded SQLite default and on Postgres + Redis.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use store::KeyScope;

use crate::common::{Api, Backend, TestEnv, key_known_to, wait};

const KIND: &str = "sales-export";

fn declaration() -> Value {
    json!({
        "about": "The month's sales, one row per invoice",
        "params_schema": {
            "type": "object",
            "properties": {
                "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
                "region": {"enum": ["north", "south"]}
            },
            "required": ["month"],
            "additionalProperties": false
        },
        "timeout_secs": 60,
        "max_attempts": 2,
        "result_media_types": ["application/json", "text/csv"]
    })
}

async fn register(api: &Api, name: &str, declaration: &Value) -> crate::common::Reply {
    api.send(Method::PUT, &format!("/v1/kinds/{name}"), Some(declaration))
        .await
}

/// A key of `tenant` with the work scope (of `kinds` only, when given),
/// once the api knows it.
async fn worker_key(env: &TestEnv, api: &Api, tenant: &str, kinds: Option<&[&str]>) -> Api {
    let scope = KeyScope::work(kinds.map(|kinds| kinds.iter().map(|k| (*k).to_owned()).collect()));
    key_known_to(env, api, tenant, &scope).await.0
}

/// An embedded service on `backend` with [`KIND`] registered for
/// tenant-a, a client of it with a key of full rights, and one with a
/// work key.
async fn with_a_kind(backend: Backend) -> (TestEnv, Api, Api) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let created = register(&api, KIND, &declaration()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let worker = worker_key(&env, &api, "tenant-a", None).await;
    (env, api, worker)
}

fn lease_body(kinds: &[&str], wait_secs: u64) -> Value {
    json!({"worker": "test-worker", "kinds": kinds, "max": 10, "wait_secs": wait_secs})
}

/// Leases until an attempt comes (within 30 s); returns it.
async fn lease_one(worker: &Api) -> Value {
    wait::until_ok("an attempt to lease", Duration::from_secs(30), async || {
        let reply = worker.post("/v1/work/lease", &lease_body(&[KIND], 5)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let attempts = reply.json()["attempts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match attempts.into_iter().next() {
            Some(attempt) => Ok(attempt),
            None => Err("none leased yet"),
        }
    })
    .await
}

fn token(attempt: &Value) -> String {
    attempt["token"].as_str().expect("token").to_owned()
}

async fn report(worker: &Api, attempt: &Value, what: &str, body: &Value) -> crate::common::Reply {
    worker
        .post(
            &format!("/v1/work/attempts/{}/{what}", token(attempt)),
            body,
        )
        .await
}

async fn count_jobs(env: &TestEnv) -> i64 {
    env.count("SELECT count(*) FROM jobs").await
}

async fn a_registered_kind_runs_through_a_worker_with_every_guarantee(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;

    let created = register(&api, KIND, &declaration()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.header("location"), Some("/v1/kinds/sales-export"));
    let again = register(&api, KIND, &declaration()).await;
    assert_eq!(
        again.status,
        StatusCode::OK,
        "the same declaration again: {}",
        again.text
    );
    assert_eq!(again.json()["created_at"], created.json()["created_at"]);
    let kinds = api.get("/v1/kinds").await.json();
    let names: Vec<&str> = kinds["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&KIND) && names.contains(&"gst-summary"),
        "{names:?}"
    );
    assert!(api.as_tenant_b().get("/v1/kinds/sales-export").await.status == StatusCode::NOT_FOUND);

    let worker = worker_key(&env, &api, "tenant-a", None).await;
    let job = api
        .submit(KIND, json!({"month": "2026-10", "region": "north"}))
        .await;
    let job_id = job["job_id"].as_str().unwrap();
    assert_eq!(job["status"], "QUEUED");

    let attempt = lease_one(&worker).await;
    assert_eq!(attempt["job_id"], job_id);
    assert_eq!(attempt["kind"], KIND);
    assert_eq!(attempt["attempt"], 1);
    assert_eq!(
        attempt["params"],
        json!({"month": "2026-10", "region": "north"})
    );
    assert!(attempt["deadline"].is_string() && attempt["lease_expires_at"].is_string());
    let running = api.job(job_id).await;
    assert_eq!(running["status"], "RUNNING");
    assert_eq!(
        running["worker"], "test-worker",
        "a running job names who holds it"
    );
    let holding = api.get("/v1/workers").await.json();
    assert_eq!(holding["workers"][0]["holding"], 1);

    let beat = report(&worker, &attempt, "heartbeat", &json!({"progress": 0.5})).await;
    assert_eq!(beat.status, StatusCode::OK, "{}", beat.text);
    assert_eq!(beat.json()["cancel_requested"], false);
    assert_eq!(api.job(job_id).await["progress"], 0.5);

    let result = json!({"rows": 3, "total": "1299.00"});
    let done = report(&worker, &attempt, "complete", &result).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert_eq!(done.json()["status"], "SUCCEEDED");
    let replay = report(&worker, &attempt, "complete", &result).await;
    assert_eq!(
        replay.status,
        StatusCode::OK,
        "a complete sent again: {}",
        replay.text
    );
    assert_eq!(replay.json(), done.json());
    let other = report(&worker, &attempt, "complete", &json!({"rows": 4})).await;
    assert_eq!(other.assert_problem(409)["type"], "/problems/attempt-ended");

    let finished = api.wait_final(job_id).await;
    assert_eq!(finished["status"], "SUCCEEDED");
    assert_eq!(finished["attempts"], 1);
    assert!(
        finished.get("worker").is_none(),
        "a finished job names a worker"
    );
    let workers = api.get("/v1/workers").await.json();
    let seen = &workers["workers"][0];
    assert_eq!(seen["name"], "test-worker");
    assert_eq!(seen["kinds"], json!([KIND]));
    assert_eq!(
        (seen["leased"].as_i64(), seen["holding"].as_i64()),
        (Some(1), Some(0))
    );
    assert_eq!(seen["connected"], true);
    assert!(
        api.as_tenant_b().get("/v1/workers").await.json()["workers"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let stored = api.get(&format!("/v1/jobs/{job_id}/result")).await;
    assert_eq!(stored.json(), result);
}

async fn a_submit_that_fails_the_schema_names_each_field_and_stores_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    assert_eq!(
        register(&api, KIND, &declaration()).await.status,
        StatusCode::CREATED
    );
    let before = count_jobs(&env).await;

    let refused = api
        .post(
            "/v1/reports/sales-export",
            &json!({"month": "October", "region": "east"}),
        )
        .await;
    let problem = refused.assert_problem(422);
    let mut fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["month", "region"], "{problem}");
    let unknown = api
        .post(
            "/v1/reports/sales-export",
            &json!({"month": "2026-10", "extra": 1}),
        )
        .await;
    unknown.assert_problem(422);
    assert_eq!(
        api.post("/v1/reports/sales-export", &json!([1]))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        count_jobs(&env).await,
        before,
        "a refused submit stored a job"
    );

    let bad_schema = register(
        &api,
        "remote-ref",
        &json!({"params_schema": {"$ref": "https://example.com/s.json"}, "timeout_secs": 10}),
    )
    .await;
    assert_eq!(
        bad_schema.assert_problem(422)["errors"][0]["field"],
        "params_schema"
    );
    let reserved = register(&api, "gst-summary", &declaration()).await;
    assert_eq!(reserved.assert_problem(422)["errors"][0]["field"], "name");
}

async fn keys_are_held_to_their_scope(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    assert_eq!(
        register(&api, KIND, &declaration()).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        register(&api.as_tenant_b(), "invoices", &declaration())
            .await
            .status,
        StatusCode::CREATED
    );
    let b_job = api
        .as_tenant_b()
        .submit("invoices", json!({"month": "2026-10"}))
        .await;
    let worker = worker_key(&env, &api, "tenant-a", None).await;

    let submit = worker
        .post("/v1/reports/sales-export", &json!({"month": "2026-10"}))
        .await;
    assert_eq!(submit.assert_problem(403)["type"], "/problems/forbidden");
    worker.get("/v1/jobs").await.assert_problem(403);
    worker
        .get(&format!("/v1/jobs/{}", b_job["job_id"].as_str().unwrap()))
        .await
        .assert_problem(403);
    let other_tenants_kind = worker
        .post("/v1/work/lease", &lease_body(&["invoices"], 0))
        .await;
    other_tenants_kind.assert_problem(422);
    let b_token = format!("{}.1", b_job["job_id"].as_str().unwrap());
    worker
        .post(
            &format!("/v1/work/attempts/{b_token}/heartbeat"),
            &json!({}),
        )
        .await
        .assert_problem(404);

    let submit_key_lease = api.post("/v1/work/lease", &lease_body(&[KIND], 0)).await;
    assert_eq!(
        submit_key_lease.assert_problem(403)["type"],
        "/problems/forbidden"
    );

    assert_eq!(
        register(&api, "reconcile", &declaration()).await.status,
        StatusCode::CREATED
    );
    let narrow = worker_key(&env, &api, "tenant-a", Some(&[KIND])).await;
    narrow
        .post("/v1/work/lease", &lease_body(&["reconcile"], 0))
        .await
        .assert_problem(403);
    let allowed = narrow.post("/v1/work/lease", &lease_body(&[KIND], 0)).await;
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.text);
}

async fn a_stale_or_cancelled_attempt_is_refused_and_changes_nothing(backend: Backend) {
    let (_env, api, worker) = with_a_kind(backend).await;

    // A lease that lapses (JOB_LEASE is 3 s in tests, and no heartbeat
    // comes): the sweeper counts the attempt and a second takes over.
    let job = api.submit(KIND, json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap();
    let first = lease_one(&worker).await;
    // Taken up, then left to lapse.
    let taken = report(&worker, &first, "heartbeat", &json!({})).await;
    assert_eq!(taken.status, StatusCode::OK, "{}", taken.text);
    let second = lease_one(&worker).await;
    assert_eq!(second["job_id"], job_id);
    assert_eq!(second["attempt"], 2, "the lapsed lease was not counted");
    for what in ["heartbeat", "fail", "complete"] {
        let body = match what {
            "fail" => json!({"retryable": false, "message": "late"}),
            "heartbeat" => json!({"progress": 0.9}),
            _ => json!({"late": true}),
        };
        let late = report(&worker, &first, what, &body).await;
        assert_eq!(
            late.assert_problem(409)["type"],
            "/problems/attempt-superseded",
            "a late {what}"
        );
    }
    let job_now = api.job(job_id).await;
    assert_eq!(
        (job_now["status"].as_str(), job_now["attempts"].as_i64()),
        (Some("RUNNING"), Some(2))
    );

    // A cancel reaches the attempt through its heartbeat.
    let cancel = api
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert!(cancel.status.is_success(), "{}", cancel.text);
    let beat = report(&worker, &second, "heartbeat", &json!({})).await;
    assert_eq!(beat.json()["cancel_requested"], true);
    let stopped = report(&worker, &second, "cancelled", &json!({})).await;
    assert_eq!(stopped.json()["status"], "CANCELLED", "{}", stopped.text);
    let after = report(&worker, &second, "complete", &json!({"rows": 1})).await;
    assert_eq!(after.assert_problem(409)["type"], "/problems/job-cancelled");
    assert_eq!(api.job(job_id).await["status"], "CANCELLED");
}

async fn a_retryable_failure_retries_until_attempts_run_out(backend: Backend) {
    let (_env, api, worker) = with_a_kind(backend).await;
    let job = api.submit(KIND, json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap();

    let failure = json!({"retryable": true, "error_type": "db_timeout", "message": "the sales database timed out"});
    let first = lease_one(&worker).await;
    let retried = report(&worker, &first, "fail", &failure).await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.text);
    assert_eq!(retried.json()["status"], "QUEUED");
    assert!(retried.json()["next_attempt_at"].is_string());
    let again = report(&worker, &first, "fail", &failure).await;
    assert_eq!(
        again.json(),
        retried.json(),
        "a fail sent again was not answered as the first"
    );

    let second = lease_one(&worker).await;
    assert_eq!(second["attempt"], 2);
    let bad_details = json!({"retryable": true, "message": "x", "details": [1, 2]});
    report(&worker, &second, "fail", &bad_details)
        .await
        .assert_problem(422);
    let failure = json!({"retryable": true, "error_type": "db_timeout",
                         "message": "the sales database timed out",
                         "details": {"host": "sales-db-2", "waited_ms": 30000}});
    let last = report(&worker, &second, "fail", &failure).await;
    assert_eq!(
        last.json()["status"],
        "FAILED",
        "the last attempt's failure did not end the job"
    );
    let failed = api.wait_final(job_id).await;
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(failed["error"]["type"], "db_timeout");
    assert_eq!(
        failed["error"]["details"],
        json!({"host": "sales-db-2", "waited_ms": 30000})
    );
    let workers = api.get("/v1/workers").await.json();
    assert_eq!(workers["workers"][0]["failed"], 2, "{workers}");
}

/// Leases until `count` attempts are held (within 30 s); returns them by
/// job id.
async fn lease_all(worker: &Api, kinds: &[&str], count: usize) -> Vec<Value> {
    let mut held: Vec<Value> = Vec::new();
    wait::until_ok("attempts to lease", Duration::from_secs(30), async || {
        let reply = worker.post("/v1/work/lease", &lease_body(kinds, 1)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        held.extend(
            reply.json()["attempts"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        if held.len() >= count {
            Ok(())
        } else {
            Err("not all leased yet")
        }
    })
    .await;
    held
}

fn attempt_of<'a>(held: &'a [Value], job: &Value) -> &'a Value {
    held.iter()
        .find(|attempt| attempt["job_id"] == job["job_id"])
        .expect("the job's attempt was leased")
}

async fn reports_are_each_applied_and_answered_as_their_own_calls_would_be(backend: Backend) {
    let (env, api, worker) = with_a_kind(backend).await;
    let mut csv_only = declaration();
    csv_only["result_media_types"] = json!(["text/csv"]);
    assert_eq!(
        register(&api, "csv-export", &csv_only).await.status,
        StatusCode::CREATED
    );
    let month = json!({"month": "2026-10"});
    let mut jobs: Vec<Value> = Vec::new();
    for kind in [KIND, KIND, KIND, KIND, "csv-export", KIND] {
        jobs.push(api.submit(kind, month.clone()).await);
    }
    let held = lease_all(&worker, &[KIND, "csv-export"], jobs.len()).await;
    let [done, retried, failed, cancelled, csv, untouched] = &jobs[..] else {
        unreachable!()
    };
    let token_of = |job: &Value| token(attempt_of(&held, job));
    let job_status = async |job: &Value| {
        api.job(job["job_id"].as_str().unwrap()).await["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // Refused as a whole, with nothing applied: the first report of each
    // call below would have ended its job.
    let complete =
        json!({"outcome": "complete", "token": token_of(untouched), "result": {"rows": 1}});
    for (body, status, field) in [
        (json!({"reports": []}), 422, Some("reports")),
        (
            json!({"reports": vec![complete.clone(); 101]}),
            422,
            Some("reports"),
        ),
        (
            json!({"reports": [complete.clone(), complete.clone()]}),
            422,
            Some("reports[1].token"),
        ),
        (
            json!({"reports": [complete.clone(), {"outcome": "fail", "token": token_of(done),
                   "retryable": true, "error_type": "no spaces", "message": "x"}]}),
            422,
            Some("reports[1].error_type"),
        ),
        (
            json!({"reports": [complete.clone(), {"outcome": "fail", "token": token_of(done),
                   "retryable": true, "message": "x", "details": [1]}]}),
            422,
            Some("reports[1].details"),
        ),
        (
            json!({"reports": [complete.clone(), {"outcome": "finished", "token": token_of(done)}]}),
            400,
            None,
        ),
        (
            json!({"reports": [complete.clone(), {"outcome": "cancelled", "token": token_of(done), "why": 1}]}),
            400,
            None,
        ),
    ] {
        let refused = worker.post("/v1/work/reports", &body).await;
        let problem = refused.assert_problem(status);
        if let Some(field) = field {
            assert_eq!(problem["errors"][0]["field"], field, "{problem}");
        }
    }
    assert_eq!(job_status(untouched).await, "RUNNING");
    assert_eq!(job_status(done).await, "RUNNING");

    let cancel = api
        .post(
            &format!("/v1/jobs/{}/cancel", cancelled["job_id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert!(cancel.status.is_success(), "{}", cancel.text);
    let batch = json!({"reports": [
        {"outcome": "complete", "token": token_of(done), "result": {"rows": 3, "total": "12.50"},
         "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        {"outcome": "fail", "token": token_of(retried), "retryable": true,
         "error_type": "db_timeout", "message": "the sales database timed out"},
        {"outcome": "fail", "token": token_of(failed), "retryable": false,
         "error_type": "bad_month", "message": "no such month", "details": {"month": "2026-10"}},
        {"outcome": "cancelled", "token": token_of(cancelled)},
        {"outcome": "complete", "token": token_of(csv), "result": {"rows": 1}},
        {"outcome": "complete", "token": "job_0000.1", "result": {}},
    ]});
    let first = worker.post("/v1/work/reports", &batch).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let answers = first.json()["reports"].as_array().cloned().unwrap();
    let statuses: Vec<i64> = answers
        .iter()
        .map(|a| a["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 200, 200, 200, 415, 404], "{answers:?}");
    let tokens: Vec<&Value> = answers.iter().map(|a| &a["token"]).collect();
    let sent: Vec<&Value> = batch["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["token"])
        .collect();
    assert_eq!(tokens, sent, "the answers are in the order sent");
    assert_eq!(
        answers[0]["body"],
        json!({"job_id": done["job_id"], "status": "SUCCEEDED"})
    );
    assert_eq!(answers[1]["body"]["status"], "QUEUED");
    assert!(answers[1]["body"]["next_attempt_at"].is_string());
    assert_eq!(answers[2]["body"]["status"], "FAILED");
    assert_eq!(answers[3]["body"]["status"], "CANCELLED");
    assert_eq!(
        answers[4]["body"]["type"],
        "/problems/unsupported-media-type"
    );
    assert_eq!(answers[5]["body"]["status"], 404);

    // Each took effect as its own call would have.
    let stored = api
        .get(&format!(
            "/v1/jobs/{}/result",
            done["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(stored.json(), json!({"rows": 3, "total": "12.50"}));
    let failed_job = api.job(failed["job_id"].as_str().unwrap()).await;
    assert_eq!(
        (
            failed_job["status"].as_str(),
            &failed_job["error"]["details"]
        ),
        (Some("FAILED"), &json!({"month": "2026-10"}))
    );
    assert_eq!(job_status(retried).await, "QUEUED");
    assert_eq!(job_status(cancelled).await, "CANCELLED");
    assert_eq!(
        job_status(csv).await,
        "RUNNING",
        "a refused report changed its job"
    );

    // Sent again after its answer was lost: answered as the first was.
    let again = worker.post("/v1/work/reports", &batch).await;
    assert_eq!(again.json(), first.json(), "the same reports again");
    let workers = api.get("/v1/workers").await.json();
    assert_eq!(workers["workers"][0]["failed"], 2, "{workers}");

    // Two reports on two attempts of one job: the later attempt's
    // applies, the earlier one's is refused as superseded.
    let second = lease_one(&worker).await;
    assert_eq!(
        (&second["job_id"], &second["attempt"]),
        (&retried["job_id"], &json!(2))
    );
    let both = worker
        .post(
            "/v1/work/reports",
            &json!({"reports": [
                {"outcome": "complete", "token": token_of(retried), "result": {"late": true}},
                {"outcome": "complete", "token": token(&second), "result": {"rows": 2}},
            ]}),
        )
        .await;
    let answers = both.json()["reports"].as_array().cloned().unwrap();
    assert_eq!(
        (answers[0]["status"].as_i64(), answers[1]["status"].as_i64()),
        (Some(409), Some(200)),
        "{answers:?}"
    );
    assert_eq!(answers[0]["body"]["type"], "/problems/attempt-superseded");
    let stored = api
        .get(&format!(
            "/v1/jobs/{}/result",
            retried["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(stored.json(), json!({"rows": 2}));

    // Another tenant's worker, and a key of other kinds, get their own
    // call's refusal, for each report.
    let theirs = worker_key(&env, &api, "tenant-b", None).await;
    let narrow = worker_key(&env, &api, "tenant-a", Some(&["csv-export"])).await;
    for (key, status) in [(&theirs, 404), (&narrow, 403)] {
        let answer = key
            .post("/v1/work/reports", &json!({"reports": [complete]}))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(
            answer.json()["reports"][0]["status"],
            status,
            "{}",
            answer.text
        );
    }
    assert_eq!(job_status(untouched).await, "RUNNING");
    // A key of full rights cannot report.
    api.post("/v1/work/reports", &json!({"reports": [complete]}))
        .await
        .assert_problem(403);
}

async fn a_streamed_result_is_stored_and_served_as_sent(backend: Backend) {
    let (_env, api, worker) = with_a_kind(backend).await;
    let job = api.submit(KIND, json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap();
    let attempt = lease_one(&worker).await;

    // Three chunks and a bit: bigger than one chunk, not a multiple of one.
    let mut csv = String::from("invoice,amount\n");
    let mut n = 0;
    while csv.len() < 700 * 1024 {
        csv.push_str(&format!("inv-{n},{}.00\n", n % 997));
        n += 1;
    }
    let path = format!("/v1/work/attempts/{}/complete", token(&attempt));
    let send = |media_type: &'static str, body: String| {
        Api::read(
            worker
                .request(Method::POST, &path)
                .header("content-type", media_type)
                .body(body),
        )
    };
    send("application/pdf", "%PDF".into())
        .await
        .assert_problem(415);
    let done = send("text/csv", csv.clone()).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    let replay = send("text/csv", csv.clone()).await;
    assert_eq!(
        replay.status,
        StatusCode::OK,
        "the same stream again: {}",
        replay.text
    );
    let different = send("text/csv", "invoice,amount\n".into()).await;
    assert_eq!(
        different.assert_problem(409)["type"],
        "/problems/attempt-ended"
    );

    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await;
    assert_eq!(result.status, StatusCode::OK);
    assert_eq!(result.header("content-type"), Some("text/csv"));
    assert_eq!(result.text.len(), csv.len());
    assert!(
        result.text == csv,
        "the served result differs from the one sent"
    );
}

async fn a_deleted_kind_refuses_submits_and_its_jobs_are_still_leased(backend: Backend) {
    let (_env, api, worker) = with_a_kind(backend).await;
    let job = api.submit(KIND, json!({"month": "2026-10"})).await;

    let deleted = api
        .send(Method::DELETE, "/v1/kinds/sales-export", None)
        .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    assert_eq!(deleted.json()["active_jobs"], 1);
    api.post("/v1/reports/sales-export", &json!({"month": "2026-10"}))
        .await
        .assert_problem(404);
    api.get("/v1/kinds/sales-export").await.assert_problem(404);
    api.send(Method::DELETE, "/v1/kinds/gst-summary", None)
        .await
        .assert_problem(409);

    let attempt = lease_one(&worker).await;
    assert_eq!(attempt["job_id"], job["job_id"]);
    let done = report(&worker, &attempt, "complete", &json!({"rows": 0})).await;
    assert_eq!(done.json()["status"], "SUCCEEDED");
}

async fn a_waiting_lease_takes_a_job_submitted_while_it_waits(backend: Backend) {
    let (_env, api, worker) = with_a_kind(backend).await;

    let waiting = {
        let worker = worker.with_key(&worker.key);
        tokio::spawn(async move {
            worker
                .post("/v1/work/lease", &lease_body(&[KIND], 30))
                .await
        })
    };
    let job = api.submit(KIND, json!({"month": "2026-10"})).await;
    let reply = waiting.await.expect("the lease");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let attempts = reply.json()["attempts"].as_array().cloned().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "the waiting lease came back without the job"
    );
    assert_eq!(attempts[0]["job_id"], job["job_id"]);
}

/// `/openapi.json` with a key holds the tenant's registered kinds among a
/// submit's bodies, their `$defs` as schemas of their own beside them;
/// without a key, or for another tenant, it holds none; a bad key is a 401.
async fn the_openapi_document_of_a_key_holds_its_tenants_kinds(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let mut declaration = declaration();
    declaration["params_schema"] = json!({
        "type": "object",
        "$defs": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}},
        "properties": {"month": {"$ref": "#/$defs/month"}},
        "required": ["month"],
        "additionalProperties": false
    });
    let created = register(&api, KIND, &declaration).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let name = "Registered.sales-export";
    let place = format!("#/components/schemas/{name}");

    let document = api.get("/openapi.json").await.json();
    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas[name]["properties"]["month"]["$ref"],
        format!("{place}.month"),
        "{}",
        schemas[name]
    );
    assert_eq!(schemas[&format!("{name}.month")]["type"], "string");
    assert!(schemas[name].get("$defs").is_none());
    assert_eq!(schemas[name]["required"], json!(["month"]));
    let bodies = schemas["ReportParams"]["oneOf"].as_array().unwrap();
    assert!(bodies.contains(&json!({"$ref": place})), "{bodies:?}");
    assert!(bodies.len() > 1, "the built-in bodies stay: {bodies:?}");
    let description = document["paths"]["/v1/reports/{kind}"]["post"]["description"]
        .as_str()
        .unwrap();
    assert!(
        description.contains("`sales-export`") && description.contains("gst-summary"),
        "{description}"
    );

    for (whose, other) in [
        (
            "no key",
            Api::read(api.client.get(api.url("/openapi.json"))).await,
        ),
        ("tenant-b", api.as_tenant_b().get("/openapi.json").await),
    ] {
        assert_eq!(other.status, StatusCode::OK, "{whose}: {}", other.text);
        assert!(
            other.json()["components"]["schemas"].get(name).is_none(),
            "{whose} sees tenant-a's kind"
        );
    }
    api.with_key("rk_not-a-key")
        .get("/openapi.json")
        .await
        .assert_problem(401);
}

crate::on_both_backends!(
    a_registered_kind_runs_through_a_worker_with_every_guarantee,
    the_openapi_document_of_a_key_holds_its_tenants_kinds,
    a_submit_that_fails_the_schema_names_each_field_and_stores_nothing,
    keys_are_held_to_their_scope,
    a_stale_or_cancelled_attempt_is_refused_and_changes_nothing,
    a_retryable_failure_retries_until_attempts_run_out,
    a_streamed_result_is_stored_and_served_as_sent,
    a_deleted_kind_refuses_submits_and_its_jobs_are_still_leased,
    a_waiting_lease_takes_a_job_submitted_while_it_waits,
    a_lease_whose_client_went_away_does_not_use_up_an_attempt,
    a_schedule_of_a_registered_kind_makes_jobs_its_workers_lease,
    waiting_leases_count_against_the_tenants_long_polls,
    reports_are_each_applied_and_answered_as_their_own_calls_would_be,
);

/// A lease whose client went away while it waited still takes the job
/// that comes (nothing stops its handler); its worker never takes the
/// lease up, so when the lease lapses the attempt is handed back
/// uncounted, and the next worker's attempt is the job's first.
async fn a_lease_whose_client_went_away_does_not_use_up_an_attempt(backend: Backend) {
    use tokio::io::AsyncWriteExt;

    let (_env, api, worker) = with_a_kind(backend).await;
    let body = lease_body(&[KIND], 30).to_string();
    let address = api.base.trim_start_matches("http://").to_owned();
    let mut ghost = tokio::net::TcpStream::connect(&address)
        .await
        .expect("a connection");
    let request = format!(
        "POST /v1/work/lease HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        worker.key,
        body.len()
    );
    ghost
        .write_all(request.as_bytes())
        .await
        .expect("the lease sent");
    // Its lease is waiting once the api counts the worker as seen.
    wait::until_true(
        "the ghost's lease waits",
        Duration::from_secs(10),
        async || api.get("/v1/workers").await.json()["workers"][0]["connected"] == true,
    )
    .await;
    drop(ghost);

    let job = api.submit(KIND, json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap();
    let taken = wait::until_ok(
        "the ghost's lease took the job",
        Duration::from_secs(10),
        async || {
            let seen = api.job(job_id).await;
            if seen["status"] == "RUNNING" {
                Ok(seen)
            } else {
                Err(seen)
            }
        },
    )
    .await;
    assert_eq!(taken["worker"], "test-worker");

    // JOB_LEASE is 3 s in tests: the untaken lease lapses and is handed back.
    let attempt = lease_one(&worker).await;
    assert_eq!(attempt["job_id"], job["job_id"]);
    assert_eq!(
        attempt["attempt"], 1,
        "the lease never taken up was counted"
    );
    let done = report(&worker, &attempt, "complete", &json!({"rows": 1})).await;
    assert_eq!(done.json()["status"], "SUCCEEDED", "{}", done.text);
    assert_eq!(api.wait_final(job_id).await["attempts"], 1);
}

/// A schedule may fire a registered kind: each fire's job is external,
/// with the kind's attempts, and its workers lease it.
async fn a_schedule_of_a_registered_kind_makes_jobs_its_workers_lease(backend: Backend) {
    let (env, api, worker) = with_a_kind(backend).await;
    let refused = api
        .post(
            "/v1/schedules",
            &json!({"kind": KIND, "params": {"month": "October"}, "cron": "0 6 1 * *", "timezone": "UTC"}),
        )
        .await;
    assert_eq!(
        refused.assert_problem(422)["errors"][0]["field"],
        "params.month"
    );
    let created = api
        .post(
            "/v1/schedules",
            &json!({"kind": KIND, "params": {"month": {"$fire": "previous_month"}},
                    "cron": "0 6 1 * *", "timezone": "UTC"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let schedule_id = created.json()["schedule_id"].as_str().unwrap().to_owned();
    let due = shared::time::now_ms() - 1_000;
    env.execute_sql(&format!(
        "UPDATE schedules SET next_fire_at = {} WHERE schedule_id = '{schedule_id}'",
        crate::common::moment_sql(backend, &due.to_string())
    ))
    .await;

    let attempt = lease_one(&worker).await;
    let job = api.job(attempt["job_id"].as_str().unwrap()).await;
    assert_eq!(job["schedule_id"], schedule_id.as_str());
    assert_eq!(
        attempt["max_attempts"], 2,
        "not the registered kind's attempts"
    );
    assert!(
        attempt["params"]["month"]
            .as_str()
            .is_some_and(|m| m.len() == 7),
        "{attempt}"
    );
    let done = report(&worker, &attempt, "complete", &json!({"rows": 0})).await;
    assert_eq!(done.json()["status"], "SUCCEEDED", "{}", done.text);
}

/// A waiting lease is a long poll: over the tenant's MAX_LONG_POLLS it is
/// a 429, and a lease that does not wait is never refused for it.
async fn waiting_leases_count_against_the_tenants_long_polls(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "true"), ("MAX_LONG_POLLS", "1")])
        .await;
    let created = register(&api, KIND, &declaration()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let worker = worker_key(&env, &api, "tenant-a", None).await;

    let waiting = {
        let worker = worker.with_key(&worker.key);
        tokio::spawn(async move {
            let body = json!({"worker": "waiter", "kinds": [KIND], "wait_secs": 8});
            worker.post("/v1/work/lease", &body).await
        })
    };
    // It holds its place once it has looked for a job: the api notes the
    // worker at each look.
    wait::until_true(
        "the first lease waits",
        Duration::from_secs(10),
        async || {
            let workers = api.get("/v1/workers").await.json();
            workers["workers"]
                .as_array()
                .is_some_and(|all| all.iter().any(|w| w["name"] == "waiter"))
        },
    )
    .await;
    let refused = wait::until_ok(
        "a second waiting lease refused",
        Duration::from_secs(10),
        async || {
            let reply = worker.post("/v1/work/lease", &lease_body(&[KIND], 1)).await;
            if reply.status == StatusCode::TOO_MANY_REQUESTS {
                Ok(reply)
            } else {
                Err(reply.status)
            }
        },
    )
    .await;
    assert!(refused.header("retry-after").is_some());
    let at_once = worker.post("/v1/work/lease", &lease_body(&[KIND], 0)).await;
    assert_eq!(at_once.status, StatusCode::OK, "{}", at_once.text);
    assert_eq!(
        waiting.await.expect("the first lease").status,
        StatusCode::OK
    );
}
