//! Workers whose clocks are wrong (Debian's `libfaketime`:
//! `testkit::clock`) beside a correct api, on both production queues.
//! Every time that decides something is the database's (`docs/design.md`,
//! One clock), so a job is neither lost, nor started early, nor taken over
//! while its worker lives, whatever a worker's clock says.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::time::{now_ms, parse_rfc3339};

use crate::common::{Api, Process, TestEnv, wait};

/// Jobs each pickup measurement submits.
const JOBS: usize = 20;
/// How much later than a correct worker's a skewed worker's pickup may be
/// (p99).
const PICKUP_SLACK_MS: i64 = 1_000;

fn ms_of(time: &Value) -> i64 {
    parse_rfc3339(time.as_str().unwrap_or_else(|| panic!("no time: {time}"))).expect("RFC 3339")
}

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

/// A worker process whose clock is `offset_s` seconds off, once its pool
/// is up.
fn start_worker(env: &TestEnv, offset_s: i64) -> Process {
    let mut settings = testkit::clock::skewed_by(offset_s);
    settings.push(("METRICS_ADDR".into(), "127.0.0.1:0".into()));
    let worker = env.start_worker_owned(&settings);
    worker.wait_for_line("metrics on http://");
    worker
}

async fn api_alone(env: &TestEnv) -> Api {
    env.start_api(&[("EMBEDDED_WORKER", "false")]).await
}

/// Submits [`JOBS`] quick jobs and waits for each: every one succeeds at
/// its first attempt. Answers the p99 of their pickups (submit to start).
async fn pickup_p99(api: &Api) -> i64 {
    let mut ids = Vec::with_capacity(JOBS);
    for _ in 0..JOBS {
        ids.push(id_of(&api.submit("sleep", json!({"ms": 1})).await));
    }
    let mut pickups = Vec::with_capacity(JOBS);
    for id in &ids {
        let done = api.wait_final(id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 1, "run once: {done}");
        pickups.push(ms_of(&done["started_at"]) - ms_of(&done["created_at"]));
    }
    pickups.sort_unstable();
    pickups[(pickups.len() * 99).div_ceil(100) - 1]
}

async fn the_only_worker_behind_runs_every_job_once_and_as_soon(env: TestEnv) {
    let api = api_alone(&env).await;
    let mut correct = start_worker(&env, 0);
    let correct_p99 = pickup_p99(&api).await;
    correct.terminate();
    for behind_s in [-2, -90] {
        let mut worker = start_worker(&env, behind_s);
        let p99 = pickup_p99(&api).await;
        assert!(
            p99 <= correct_p99 + PICKUP_SLACK_MS,
            "a worker {behind_s} s off picks up at p99 {p99} ms, a correct one {correct_p99} ms"
        );
        worker.terminate();
    }
}

/// The first time (by this test's clock, which is the database's host's)
/// each of `ids` is seen past QUEUED.
async fn first_seen_started(api: &Api, ids: &[String]) -> Vec<i64> {
    let mut seen: Vec<Option<i64>> = vec![None; ids.len()];
    wait::until_ok(
        "the delayed jobs start",
        Duration::from_secs(60),
        async || {
            for (id, seen) in ids.iter().zip(seen.iter_mut()) {
                if seen.is_none() && api.job(id).await["status"] != "QUEUED" {
                    *seen = Some(now_ms());
                }
            }
            seen.iter().copied().collect::<Option<Vec<i64>>>().ok_or(())
        },
    )
    .await
}

async fn workers_ahead_and_behind_neither_take_over_nor_start_early(mut env: TestEnv) {
    // Backoffs of 1 s, then 2 s (each with jitter: half to all of it).
    env.set("RETRY_BASE_DELAY", "1s");
    env.set("RETRY_MAX_DELAY", "4s");
    env.set("WORKER_CONCURRENCY", "8");
    let api = api_alone(&env).await;
    let ahead = start_worker(&env, 90);
    let behind = start_worker(&env, -90);

    // Jobs longer than two leases (`JOB_LEASE` is 3 s), renewed by
    // heartbeats written by either clock.
    let mut long = Vec::new();
    for _ in 0..8 {
        long.push(id_of(&api.submit("sleep", json!({"ms": 7_000})).await));
    }
    let mut delayed = Vec::new();
    let mut due = Vec::new();
    for _ in 0..4 {
        let reply = api
            .post("/v1/reports/sleep?delay=4", &json!({"ms": 1}))
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
        let job = reply.json();
        due.push(ms_of(&job["waiting"]["until"]));
        delayed.push(id_of(&job));
    }
    let mut retried = Vec::new();
    for _ in 0..2 {
        let job = api.submit("sleep", json!({"ms": 1, "fail_times": 2})).await;
        retried.push(id_of(&job));
    }

    let started = first_seen_started(&api, &delayed).await;
    for ((id, due), started) in delayed.iter().zip(&due).zip(&started) {
        assert!(
            started >= due,
            "delayed job {id} started {} ms before its time",
            due - started
        );
    }
    for id in &long {
        let done = api.wait_final(id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(
            done["attempts"], 1,
            "taken over while its worker lived: {done}"
        );
    }
    for id in &retried {
        let done = api.wait_final(id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 3, "{done}");
        // Two backoffs: at least 0.5 s + 1 s, at most 1 s + 2 s, and the
        // three runs and their claims.
        let took = ms_of(&done["finished_at"]) - ms_of(&done["created_at"]);
        assert!(
            (1_500..=5_000).contains(&took),
            "two backoffs of 1 s and 2 s took {took} ms in all: {done}"
        );
    }
    for mut worker in [ahead, behind] {
        worker.terminate();
    }
}

async fn a_schedule_fires_once_a_minute_on_time_whatever_the_workers_clocks(env: TestEnv) {
    let api = api_alone(&env).await;
    let workers = [start_worker(&env, 90), start_worker(&env, -90)];
    let reply = api
        .post(
            "/v1/schedules",
            &json!({"kind": "sleep", "params": {"ms": 1}, "cron": "* * * * *", "timezone": "UTC"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let schedule = reply.json();
    let schedule_id = schedule["schedule_id"].as_str().expect("schedule_id");
    let first = ms_of(&schedule["next_fires"][0]);
    let jobs_of = async || {
        let reply = api
            .get(&format!("/v1/jobs?schedule_id={schedule_id}&limit=100"))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.json()["data"].as_array().expect("data").clone()
    };
    for (n, fire) in [first, first + 60_000].into_iter().enumerate() {
        // Made up to 5 s ahead of its fire, as a job due at it.
        let job = wait::until_ok(
            "the fire's job",
            Duration::from_millis(u64::try_from(fire - now_ms()).unwrap_or(0) + 30_000),
            async || {
                let mut jobs = jobs_of().await;
                jobs.sort_by_key(|job| ms_of(&job["created_at"]));
                jobs.into_iter().nth(n).ok_or(())
            },
        )
        .await;
        let started = first_seen_started(&api, &[id_of(&job)]).await[0];
        assert!(
            started >= fire,
            "the fire of {fire} started {} ms early",
            fire - started
        );
        assert!(
            started < fire + 30_000,
            "the fire of {fire} started {} ms late",
            started - fire
        );
    }
    // One job per fire, and none for a later fire yet.
    let jobs = jobs_of().await;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    drop(workers);
}

crate::on_both_production_queues!(
    the_only_worker_behind_runs_every_job_once_and_as_soon,
    workers_ahead_and_behind_neither_take_over_nor_start_early,
    a_schedule_fires_once_a_minute_on_time_whatever_the_workers_clocks,
);
