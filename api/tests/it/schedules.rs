//! Recurring schedules (`docs/api.md`, Schedules) on every queue shape:
//! one job per fire, its params filled from the fire, missed fires by
//! policy, and the resource's own life. Fires are brought due by moving a
//! schedule's next fire into the past in its row (what a clock that ran
//! on would do), except in the test that waits for a real minute.

use chrono::Datelike;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shared::time::{now_ms, parse_rfc3339};

use crate::common::{Api, Backend, QueueShape, Reply, TestEnv, moment_sql, run_a_later_job};

fn ms_of(time: &Value) -> i64 {
    parse_rfc3339(time.as_str().expect("a time")).expect("RFC 3339")
}

async fn create(api: &Api, body: Value) -> Reply {
    api.post("/v1/schedules", &body).await
}

async fn created(api: &Api, body: Value) -> Value {
    let reply = create(api, body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.json()
}

fn backend(env: &TestEnv) -> Backend {
    env.backend
}

/// Moves the schedule's next fire to `at` (unix ms) in its row.
async fn fire_due_at(env: &TestEnv, schedule_id: &str, at: i64) {
    env.execute_sql(&format!(
        "UPDATE schedules SET next_fire_at = {} WHERE schedule_id = '{schedule_id}'",
        moment_sql(backend(env), &at.to_string())
    ))
    .await;
}

/// The jobs of a schedule, oldest first (`GET /v1/jobs?schedule_id=`).
async fn jobs_of(api: &Api, schedule_id: &str) -> Vec<Value> {
    let reply = api
        .get(&format!("/v1/jobs?schedule_id={schedule_id}&limit=200"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut jobs: Vec<Value> = reply.json()["data"].as_array().expect("data").clone();
    assert!(jobs.iter().all(|job| job["schedule_id"] == schedule_id));
    jobs.reverse();
    jobs
}

/// The schedule's jobs as the whole list of the tenant's jobs shows them.
async fn jobs_of_in_the_whole_list(api: &Api, schedule_id: &str) -> usize {
    let all = api.get("/v1/jobs?limit=200").await.json();
    all["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter(|job| job["schedule_id"] == schedule_id)
        .count()
}

async fn wait_for_jobs_of(api: &Api, schedule_id: &str, n: usize) -> Vec<Value> {
    crate::common::wait::until_ok(
        &format!("{n} jobs of schedule {schedule_id}"),
        std::time::Duration::from_secs(30),
        async || {
            let jobs = jobs_of(api, schedule_id).await;
            if jobs.len() >= n {
                Ok(jobs)
            } else {
                Err(jobs.len())
            }
        },
    )
    .await
}

/// A daily cron whose next fire is about 12 hours away: no fire of its
/// own comes due (or within the scheduler's 5 s ahead) while a test runs,
/// so every job it makes is one the test brought due.
fn far_daily_cron() -> String {
    let far = chrono::Utc::now() + chrono::Duration::hours(12);
    format!("{} {} * * *", far.format("%M"), far.format("%H"))
}

fn gst_monthly() -> Value {
    json!({
        "kind": "gst-summary",
        "params": {"month": {"$fire": "previous_month"}},
        "cron": "0 6 1 * *",
        "timezone": "Asia/Kolkata",
    })
}

async fn a_due_fire_makes_one_job_with_its_template_filled(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let schedule = created(api, gst_monthly()).await;
    let id = schedule["schedule_id"].as_str().expect("schedule_id");
    let fires: Vec<i64> = schedule["next_fires"]
        .as_array()
        .expect("next_fires")
        .iter()
        .map(ms_of)
        .collect();
    assert_eq!(fires.len(), 5, "{schedule}");
    assert!(fires.windows(2).all(|w| w[0] < w[1]));
    assert!(fires[0] > now_ms());

    // A fire comes due (5 s ago).
    fire_due_at(&running.env, id, now_ms() - 5_000).await;
    let jobs = wait_for_jobs_of(api, id, 1).await;
    let job = api
        .wait_final(jobs[0]["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(job["status"], "SUCCEEDED", "{job}");
    assert_eq!(job["schedule_id"], id);
    assert!(job["result_url"].is_string());
    // Filled from the fire's own time (5 s ago, in Kolkata).
    let fired = chrono::DateTime::from_timestamp_millis(now_ms() - 5_000)
        .expect("now")
        .with_timezone(&chrono_tz::Asia::Kolkata);
    let previous = fired
        .date_naive()
        .with_day(1)
        .and_then(|d| d.checked_sub_months(chrono::Months::new(1)))
        .expect("a month")
        .format("%Y-%m")
        .to_string();
    assert_eq!(job["params"], json!({"month": previous}), "{job}");

    let after = api.get(&format!("/v1/schedules/{id}")).await.json();
    assert!(after["last_fire_at"].is_string(), "{after}");
    assert_eq!(
        ms_of(&after["next_fires"][0]),
        fires[0],
        "it goes on from its next real fire"
    );
    // A later job runs after anything the fire queued: still one job.
    run_a_later_job(api).await;
    assert_eq!(jobs_of(api, id).await.len(), 1);
    assert_eq!(jobs_of_in_the_whole_list(api, id).await, 1);
}

async fn a_schedule_fires_on_the_minute_by_the_clock(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let schedule = created(
        api,
        json!({"kind": "sleep", "params": {"ms": 1}, "cron": "* * * * *", "timezone": "UTC"}),
    )
    .await;
    let id = schedule["schedule_id"].as_str().expect("schedule_id");
    let first = ms_of(&schedule["next_fires"][0]);
    assert_eq!(first % 60_000, 0, "on the minute");
    let job = crate::common::wait::until_ok(
        "the first fire's job",
        std::time::Duration::from_secs(75),
        async || {
            let jobs = jobs_of(api, id).await;
            jobs.into_iter().next().ok_or(())
        },
    )
    .await;
    // Made ahead of its fire, as a job due at it: it starts at the fire,
    // never before. How soon after is the bench's to measure (`--scenarios
    // schedules`); late by seconds here would be a fire left to a later
    // pass.
    let done = api
        .wait_final(job["job_id"].as_str().expect("job_id"))
        .await;
    let (made, started) = (ms_of(&done["created_at"]), ms_of(&done["started_at"]));
    assert!(made <= started);
    assert!(
        (first..first + 5_000).contains(&started),
        "started {} ms after its fire",
        started - first
    );
}

async fn a_scheduler_killed_at_the_moment_of_the_fire_leaves_exactly_one_job(shape: QueueShape) {
    // The process that fires dies after writing the fire's job and before
    // its commit; the next one fires it again, once.
    let mut running = shape
        .start(&[("FAILPOINTS", "store::schedule_fired_before_commit=return")])
        .await;
    let schedule = created(
        &running.api,
        json!({"kind": "sleep", "params": {"ms": 1}, "cron": far_daily_cron(), "timezone": "UTC"}),
    )
    .await;
    let id = schedule["schedule_id"]
        .as_str()
        .expect("schedule_id")
        .to_owned();
    let due = now_ms() - 2_000;
    fire_due_at(&running.env, &id, due).await;
    running.env.extra_env.clear();
    let api = if shape == QueueShape::Embedded {
        running.api.process.as_mut().expect("api").wait_exit();
        running.env.start_embedded().await
    } else {
        running.worker.as_mut().expect("worker").wait_exit();
        running.worker = Some(running.env.start_worker(&[]));
        running.api
    };
    let jobs = wait_for_jobs_of(&api, &id, 1).await;
    let done = api
        .wait_final(jobs[0]["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(done["status"], "SUCCEEDED");
    run_a_later_job(&api).await;
    assert_eq!(jobs_of(&api, &id).await.len(), 1, "one job for the fire");
    let after = api.get(&format!("/v1/schedules/{id}")).await.json();
    assert_eq!(ms_of(&after["last_fire_at"]), due, "{after}");
}

async fn missed_fires_follow_the_schedules_policy(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let cron = far_daily_cron();
    let daily = |misfire: &str| json!({"kind": "sleep", "params": {"ms": 1}, "cron": cron, "timezone": "UTC", "misfire": misfire});
    let run_once = created(api, daily("run_once")).await;
    let skip = created(api, daily("skip")).await;
    let (run_once, skip) = (
        run_once["schedule_id"].as_str().expect("id").to_owned(),
        skip["schedule_id"].as_str().expect("id").to_owned(),
    );
    // As if every process had been down for three days.
    let long_ago = now_ms() - 3 * 86_400_000;
    fire_due_at(&running.env, &run_once, long_ago).await;
    fire_due_at(&running.env, &skip, long_ago).await;
    wait_for_jobs_of(api, &run_once, 1).await;
    let fired = crate::common::wait::until_ok(
        "the skipping schedule moved on",
        std::time::Duration::from_secs(30),
        async || {
            let schedule = api.get(&format!("/v1/schedules/{skip}")).await.json();
            if ms_of(&schedule["next_fires"][0]) > now_ms() - 60_000 {
                Ok(schedule)
            } else {
                Err(schedule)
            }
        },
    )
    .await;
    assert_eq!(
        fired["last_fire_at"],
        Value::Null,
        "skip made no job: {fired}"
    );
    run_a_later_job(api).await;
    assert_eq!(jobs_of(api, &run_once).await.len(), 1, "one job, not three");
    assert_eq!(jobs_of(api, &skip).await.len(), 0);
    let schedule = api.get(&format!("/v1/schedules/{run_once}")).await.json();
    let last = ms_of(&schedule["last_fire_at"]);
    assert!(
        last > now_ms() - 86_400_000 && last <= now_ms(),
        "the latest missed fire ran, not the first: {schedule}"
    );
}

async fn bad_schedules_are_refused_by_field_and_store_nothing(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let base = gst_monthly();
    let with = |member: &str, value: Value| {
        let mut body = base.clone();
        body[member] = value;
        body
    };
    for (body, field) in [
        (with("cron", json!("0 6 1 * * *")), "cron"),
        (with("cron", json!("0 25 * * *")), "cron"),
        (with("cron", json!("0 6 30 2 *")), "cron"),
        (with("timezone", json!("IST")), "timezone"),
        (with("kind", json!("no-such-kind")), "kind"),
        (
            with("params", json!({"month": {"$fire": "last_month"}})),
            "params.month",
        ),
        (with("params", json!({"month": "2026-13"})), "params.month"),
        (
            with("params", json!({"month": {"$fire": "date"}})),
            "params.month",
        ),
        (with("params", json!([1])), "params"),
        (with("misfire", json!("catch_up")), "misfire"),
        (with("starts_at", json!("2027-01-01")), "starts_at"),
        (with("ends_at", json!("2020-01-01T00:00:00Z")), "ends_at"),
    ] {
        let reply = create(api, body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            reply.text
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        let errors = reply.json()["errors"].clone();
        assert!(
            errors
                .as_array()
                .expect("errors")
                .iter()
                .any(|e| e["field"] == field),
            "{body}: {errors}"
        );
    }
    let unknown = with("every", json!("day"));
    assert_eq!(create(api, unknown).await.status, StatusCode::BAD_REQUEST);
    // Read whole as JSON, so kept small.
    let big = with("params", json!({"month": "x".repeat(70 * 1024)}));
    let reply = create(api, big).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text
    );
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let listed = api.get("/v1/schedules").await.json();
    assert_eq!(listed["data"], json!([]), "nothing was stored");
}

async fn a_schedule_is_listed_paused_resumed_changed_and_deleted(shape: QueueShape) {
    let running = shape.start(&[]).await;
    let api = &running.api;
    let post = |path: String, key: &'static str| {
        Api::read(
            api.request(Method::POST, &path)
                .header("idempotency-key", key),
        )
    };
    let reply = Api::read(
        api.request(Method::POST, "/v1/schedules")
            .header("idempotency-key", "monthly-gst")
            .json(&gst_monthly()),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let again = Api::read(
        api.request(Method::POST, "/v1/schedules")
            .header("idempotency-key", "monthly-gst")
            .json(&gst_monthly()),
    )
    .await;
    assert_eq!(again.text, reply.text, "a retried create replays");
    let schedule = reply.json();
    let id = schedule["schedule_id"].as_str().expect("id").to_owned();
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/schedules/{id}").as_str())
    );
    let listed = api.get("/v1/schedules").await.json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");

    let paused = post(format!("/v1/schedules/{id}/pause"), "pause-1").await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.text);
    assert_eq!(paused.json()["paused"], true);
    assert_eq!(paused.json()["next_fires"], json!([]));
    // A due fire of a paused schedule makes nothing.
    fire_due_at(&running.env, &id, now_ms() - 1_000).await;
    run_a_later_job(api).await;
    assert!(jobs_of(api, &id).await.is_empty());
    let resumed = post(format!("/v1/schedules/{id}/resume"), "resume-1").await;
    assert_eq!(resumed.json()["paused"], false);
    assert!(
        ms_of(&resumed.json()["next_fires"][0]) > now_ms(),
        "from now on"
    );

    let changed = api
        .send(
            Method::PATCH,
            &format!("/v1/schedules/{id}"),
            Some(&json!({"cron": "30 2 * * *", "timezone": "America/New_York", "misfire": "skip"})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    let changed = changed.json();
    assert_eq!(changed["misfire"], "skip");
    assert_eq!(changed["params"], gst_monthly()["params"]);
    let refused = api
        .send(
            Method::PATCH,
            &format!("/v1/schedules/{id}"),
            Some(&json!({"timezone": "Mars/Olympus"})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let kept = api.get(&format!("/v1/schedules/{id}")).await.json();
    assert_eq!(
        kept["timezone"], "America/New_York",
        "a refused change changes nothing"
    );

    let deleted = api
        .send(Method::DELETE, &format!("/v1/schedules/{id}"), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = api.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        api.as_tenant_b()
            .get(&format!("/v1/schedules/{id}"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

crate::on_every_queue_shape!(
    a_due_fire_makes_one_job_with_its_template_filled,
    a_schedule_fires_on_the_minute_by_the_clock,
    a_scheduler_killed_at_the_moment_of_the_fire_leaves_exactly_one_job,
    missed_fires_follow_the_schedules_policy,
    bad_schedules_are_refused_by_field_and_store_nothing,
    a_schedule_is_listed_paused_resumed_changed_and_deleted,
);
