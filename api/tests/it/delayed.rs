//! Delayed jobs (`docs/api.md`, Submit: `run_at` and `delay`) and the
//! job's `waiting`, on every queue shape.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shared::time::{now_ms, parse_rfc3339};

use crate::common::{Api, QueueShape, Reply, run_a_later_job};

/// How late a delayed job may start after its time here, on a machine
/// running the whole suite at once: the promise (within a second) is
/// measured by the bench (`scripts/bench --scenarios delayed`); this
/// catches a job left for the lost-message sweep or `REPUBLISH_AFTER`.
const ON_TIME_MS: i64 = 5_000;

fn ms_of(time: &Value) -> i64 {
    parse_rfc3339(time.as_str().expect("a time")).expect("RFC 3339")
}

async fn submit_at(api: &Api, query: &str, params: Value) -> Reply {
    api.post(&format!("/v1/reports/sleep?{query}"), &params)
        .await
}

async fn a_delayed_job_waits_then_starts_at_its_time(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let before = now_ms();
    let reply = submit_at(api, "delay=3", json!({"ms": 1})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let retry_after: i64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((2..=3).contains(&retry_after), "Retry-After {retry_after}");
    let job = reply.json();
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(job["waiting"]["reason"], "scheduled", "{job}");
    let start = ms_of(&job["waiting"]["until"]);
    // Both times are the api's (the database's clock), which this test's
    // own clock may differ from by the few milliseconds the api's reading
    // of it was off.
    assert_eq!(
        start - ms_of(&job["created_at"]),
        3_000,
        "its start is 3 s after the submit: {job}"
    );
    assert!(
        (before - 1_000..=now_ms() + 1_000).contains(&ms_of(&job["created_at"])),
        "made while submitted: {job}"
    );
    let job_id = job["job_id"].as_str().expect("job_id").to_owned();

    // A job submitted after it, to run at once, runs first.
    let later = run_a_later_job(api).await;
    assert_ne!(later, job_id);
    let waiting = api.job(&job_id).await;
    if now_ms() < start {
        assert_eq!(
            waiting["status"], "QUEUED",
            "not before its time: {waiting}"
        );
        assert_eq!(waiting["waiting"]["reason"], "scheduled");
        assert_eq!(waiting["started_at"], Value::Null);
    }

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["waiting"], Value::Null);
    let started = ms_of(&done["started_at"]);
    assert!(
        started >= start,
        "started {started} before its time {start}"
    );
    assert!(
        started - start <= ON_TIME_MS,
        "started {} ms after its time",
        started - start
    );
}

async fn a_time_in_the_past_runs_at_once_and_run_at_sets_the_start(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let past = submit_at(api, "run_at=2020-01-01T00:00:00Z", json!({"ms": 1})).await;
    assert_eq!(past.status, StatusCode::ACCEPTED, "{}", past.text);
    let past = past.json();
    assert_ne!(past["waiting"]["reason"], "scheduled", "{past}");
    let done = api
        .wait_final(past["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(done["status"], "SUCCEEDED");

    // An offset other than Z names the same instant.
    let at = now_ms() + 2_000;
    let text = chrono::DateTime::from_timestamp_millis(at)
        .expect("a time")
        .with_timezone(&chrono::FixedOffset::east_opt(5 * 3600 + 1800).expect("offset"))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    let query = format!("run_at={}", text.replace('+', "%2B"));
    let reply = submit_at(api, &query, json!({"ms": 1})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let job = reply.json();
    assert_eq!(ms_of(&job["waiting"]["until"]), at, "{job}");
    let done = api
        .wait_final(job["job_id"].as_str().expect("job_id"))
        .await;
    let started = ms_of(&done["started_at"]);
    assert!(
        (at..=at + ON_TIME_MS).contains(&started),
        "started at {started}, due {at}"
    );
}

async fn a_delayed_job_cancelled_before_its_time_never_runs(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let cancelled = submit_at(api, "delay=1", json!({"ms": 1})).await.json();
    let cancelled_id = cancelled["job_id"].as_str().expect("job_id");
    let reply = api
        .post(&format!("/v1/jobs/{cancelled_id}/cancel"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json()["status"], "CANCELLED");
    assert_eq!(reply.json()["waiting"], Value::Null);
    // Due after it: once this one has run, the cancelled one's time has
    // passed and the relay, which publishes due rows oldest first, would
    // have published it before.
    let after = submit_at(api, "delay=2", json!({"ms": 1})).await.json();
    let after = api
        .wait_final(after["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(after["status"], "SUCCEEDED");
    let job = api.job(cancelled_id).await;
    assert_eq!(job["status"], "CANCELLED", "{job}");
    assert_eq!(job["attempts"], 0, "it never ran: {job}");
    assert_eq!(job["started_at"], Value::Null);
}

async fn bad_starts_are_refused_and_store_nothing(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let too_far = chrono::DateTime::from_timestamp_millis(now_ms() + 367 * 24 * 3_600_000)
        .expect("a time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for (query, field) in [
        ("run_at=2026-12-03", "run_at"),
        ("run_at=tomorrow", "run_at"),
        ("run_at=2026-12-03T06:00:00", "run_at"),
        ("run_at=", "run_at"),
        (&format!("run_at={too_far}") as &str, "run_at"),
        ("delay=-1", "delay"),
        ("delay=1.5", "delay"),
        ("delay=10s", "delay"),
        ("delay=", "delay"),
        ("delay=31622401", "delay"),
        ("delay=99999999999999999999999", "delay"),
        ("delay=5&run_at=2026-12-03T06:00:00Z", "delay"),
    ] {
        let reply = submit_at(api, query, json!({"ms": 1})).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            reply.text
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json"),
            "{query}"
        );
        assert_eq!(
            reply.json()["errors"][0]["field"],
            field,
            "{query}: {}",
            reply.text
        );
    }
    let page = api.get("/v1/jobs").await.json();
    assert_eq!(page["data"], json!([]), "nothing was stored");
}

async fn the_start_is_part_of_the_idempotency_fingerprint(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let post = |query: &'static str| {
        Api::read(
            api.request(Method::POST, &format!("/v1/reports/sleep?{query}"))
                .header("idempotency-key", "nightly-export")
                .json(&json!({"ms": 1})),
        )
    };
    let first = post("delay=60").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let again = post("delay=60").await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text, first.text, "the stored 202, its start included");
    let other = post("delay=120").await;
    assert_eq!(
        other.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another start under the same key is another request: {}",
        other.text
    );
    let page = api.get("/v1/jobs").await.json();
    assert_eq!(page["data"].as_array().map(Vec::len), Some(1));
}

async fn a_retry_waiting_out_its_backoff_says_so(shape: QueueShape) {
    let running = shape
        .start(&[("RETRY_BASE_DELAY", "4s"), ("RETRY_MAX_DELAY", "4s")])
        .await;
    let api = &running.api;
    let job = api.submit("sleep", json!({"ms": 1, "fail_times": 1})).await;
    let job_id = job["job_id"].as_str().expect("job_id");
    let waiting = api
        .wait_job(job_id, "its first attempt failed", |job| {
            job["status"] == "QUEUED" && job["attempts"] == 1
        })
        .await;
    assert_eq!(waiting["waiting"]["reason"], "retry_backoff", "{waiting}");
    assert_eq!(waiting["waiting"]["until"], waiting["next_attempt_at"]);
    let reply = api.get(&format!("/v1/jobs/{job_id}")).await;
    let retry_after: i64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    let left = ms_of(&waiting["waiting"]["until"]) - now_ms();
    if left > 1_000 {
        assert!(retry_after > 1, "the backoff's end, not 1 s: {retry_after}");
    }
    assert!(retry_after <= 4, "{retry_after}");
    let done = api.wait_final(job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
}

async fn a_delayed_job_runs_on_time_after_every_process_is_killed(shape: QueueShape) {
    let mut running = shape.start(&[]).await;
    let reply = submit_at(&running.api, "delay=4", json!({"ms": 1})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let job = reply.json();
    let start = ms_of(&job["waiting"]["until"]);
    let job_id = job["job_id"].as_str().expect("job_id").to_owned();
    running.api.process.as_mut().expect("api").kill_hard();
    if let Some(worker) = running.worker.as_mut() {
        worker.kill_hard();
    }
    let api = if shape == QueueShape::Embedded {
        running.env.start_embedded().await
    } else {
        let api = running.env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
        running.worker = Some(running.env.start_worker(&[]));
        api
    };
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    let started = ms_of(&done["started_at"]);
    assert!(
        (start..=start + ON_TIME_MS).contains(&started),
        "started {} ms after its time",
        started - start
    );
}

crate::on_every_queue_shape!(
    a_delayed_job_runs_on_time_after_every_process_is_killed,
    a_delayed_job_waits_then_starts_at_its_time,
    a_time_in_the_past_runs_at_once_and_run_at_sets_the_start,
    a_delayed_job_cancelled_before_its_time_never_runs,
    bad_starts_are_refused_and_store_nothing,
    the_start_is_part_of_the_idempotency_fingerprint,
    a_retry_waiting_out_its_backoff_says_so,
);
