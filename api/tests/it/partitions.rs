//! Partitions: a network between a process and Postgres or Redis that
//! goes silent without closing its connections, or slows down, made by a
//! proxy of the tests' own (`testkit::proxy`) on the shared servers (the
//! servers themselves are never touched). Under retrying clients, the api
//! answers 503 within `REQUEST_TIMEOUT` instead of hanging, a worker cut
//! off from Postgres loses its jobs to another worker and its late writes
//! are fenced off, and once the network heals every accepted job has
//! SUCCEEDED once.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use testkit::{Fault, FaultProxy};

use crate::common::{
    Announcements, Backend, KEY_A, Process, RUNNER_INFO, TestEnv, assert_announced_once, wait,
    wait_for_stale_attempts,
};
use crate::faults::{Stream, assert_all_succeed, assert_up};

/// How long the api may take to answer anything in these tests.
const REQUEST_TIMEOUT_S: u64 = 3;
/// How much later than `REQUEST_TIMEOUT` an answer may come (the test's
/// own client, a busy machine).
const SLACK: Duration = Duration::from_secs(2);
/// How long after healing every accepted job must have succeeded.
const RECOVERY: Duration = Duration::from_secs(30);

fn started_worker(env: &TestEnv, settings: &[(&str, &str)]) -> Process {
    let mut settings = settings.to_vec();
    settings.push(("METRICS_ADDR", "127.0.0.1:0"));
    let worker = env.start_worker(&settings);
    worker.wait_for_line("metrics on http://");
    worker
}

/// One submit with its own key; answers its status, whether it said
/// `Retry-After`, how long it took, and the job's id if accepted.
async fn submit_once(base: &str, key: &str) -> (StatusCode, bool, Duration, Option<String>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let sent = Instant::now();
    let response = http
        .post(format!("{base}/v1/reports/sleep"))
        .bearer_auth(KEY_A)
        .header("Idempotency-Key", key)
        .json(&json!({"ms": 1}))
        .send()
        .await
        .expect("an answer, not a hung or closed connection");
    let retry_after = response.headers().contains_key("retry-after");
    let (status, took) = (response.status(), sent.elapsed());
    let job: serde_json::Value = response.json().await.unwrap_or_default();
    let job_id = job["job_id"].as_str().map(str::to_owned);
    (status, retry_after, took, job_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_cut_off_from_postgres_answers_503_in_time_and_recovers_by_itself() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let (proxy, database_url) = FaultProxy::in_front_of(&env.database_url).await;
    let timeout = REQUEST_TIMEOUT_S.to_string() + "s";
    let mut api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("DATABASE_URL", &database_url),
            ("REQUEST_TIMEOUT", &timeout),
        ])
        .await;
    let mut worker = started_worker(&env, &[]);
    let stream = Stream::start(&api.base, 4, 30, 1);
    stream
        .wait_until("20 submits accepted", |a| a.accepted() >= 20)
        .await;

    proxy.set(Fault::Blackhole);
    let refused_before = stream.answers.refused();
    // Each answer comes within the deadline, as a 503 with Retry-After,
    // whether the request waited for a pooled connection or was inside a
    // statement when the network went silent.
    for n in 0..3 {
        let (status, retry_after, took, _) = submit_once(&api.base, &format!("probe-{n}")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "probe {n}");
        assert!(retry_after, "probe {n}: a 503 says when to come back");
        assert!(
            took < Duration::from_secs(REQUEST_TIMEOUT_S) + SLACK,
            "probe {n} answered after {took:?}"
        );
    }
    let asked = Instant::now();
    let ready = api.get("/readyz").await;
    let problem = ready.assert_problem(503);
    assert!(asked.elapsed() < Duration::from_secs(2) + SLACK);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or("")
            .contains("database"),
        "{problem}"
    );
    stream
        .wait_until("8 more submits refused", |a| {
            a.refused() >= refused_before + 8
        })
        .await;

    proxy.heal();
    let healed = Instant::now();
    // The probes' keys, retried after healing, make one job each.
    let mut probes = Vec::new();
    for n in 0..3 {
        let key = format!("probe-{n}");
        let reply = wait::until_ok(&format!("{key} accepted"), RECOVERY, async || {
            let reply = api
                .client
                .post(api.url("/v1/reports/sleep"))
                .bearer_auth(KEY_A)
                .header("Idempotency-Key", &key)
                .json(&json!({"ms": 1}))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            match reply.status() {
                StatusCode::ACCEPTED => Ok(reply.json::<serde_json::Value>().await.unwrap()),
                other => Err(other.to_string()),
            }
        })
        .await;
        probes.push((key, reply["job_id"].as_str().unwrap().to_owned()));
    }
    println!("first submit accepted {:?} after healing", healed.elapsed());
    let mut accepted = stream.accepted().await;
    accepted.extend(probes);
    assert_all_succeed(&env, &accepted, healed + RECOVERY).await;
    assert_eq!(api.get("/readyz").await.status, StatusCode::OK);
    assert_up("worker", &mut worker);
    assert_up("api", api.process.as_mut().expect("api"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_postgres_loses_its_jobs_to_another_and_its_late_writes_are_fenced() {
    let mut env = TestEnv::new(Backend::PgRedis).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let (proxy, database_url) = FaultProxy::in_front_of(&env.database_url).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let mut cut_off = started_worker(&env, &[("DATABASE_URL", &database_url), RUNNER_INFO]);
    let mut jobs = Vec::new();
    for _ in 0..4 {
        let job = api.submit("sleep", json!({"ms": 2000})).await;
        jobs.push(job["job_id"].as_str().unwrap().to_owned());
    }
    for job_id in &jobs {
        api.wait_status(job_id, "RUNNING").await;
    }

    // Silent for 30 s with its four jobs running: past their leases
    // (3 s), another worker takes them over.
    proxy.set(Fault::Blackhole);
    let silenced = Instant::now();
    let _other = started_worker(&env, &[]);
    let mut done = Vec::new();
    for job_id in &jobs {
        let job = api.wait_final(job_id).await;
        assert_eq!(job["status"], "SUCCEEDED", "{job}");
        assert_eq!(job["attempts"], 2, "taken over once: {job}");
        done.push(job);
    }
    let silence = Duration::from_secs(30).saturating_sub(silenced.elapsed());
    tokio::time::sleep(silence).await;

    // Healed: what it held back reaches Postgres and is fenced off.
    proxy.heal();
    wait_for_stale_attempts(&cut_off, jobs.len()).await;
    for (job_id, before) in jobs.iter().zip(&done) {
        let after = api.job(job_id).await;
        assert_eq!(after["status"], "SUCCEEDED");
        assert_eq!(after["attempts"], 2, "{after}");
        assert_eq!(
            after["finished_at"], before["finished_at"],
            "nothing rewritten"
        );
        let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
        assert_eq!(result["attempt"], 2, "the result is the second attempt's");
    }
    let ids: Vec<&str> = jobs.iter().map(String::as_str).collect();
    assert_announced_once(&announced, &api, &ids, "job.succeeded").await;
    assert_up("cut-off worker", &mut cut_off);
    // And it works again.
    let later = api.submit("sleep", json!({"ms": 1})).await;
    assert_eq!(
        api.wait_final(later["job_id"].as_str().unwrap()).await["status"],
        "SUCCEEDED"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_redis_leaves_every_job_done_once() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let (proxy, redis_url) = FaultProxy::in_front_of(&env.redis_url).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut cut_off = started_worker(&env, &[("REDIS_URL", &redis_url)]);
    let mut other = started_worker(&env, &[]);
    let stream = Stream::start(&api.base, 4, 30, 50);
    stream
        .wait_until("20 submits accepted", |a| a.accepted() >= 20)
        .await;

    // Silent until the worker has felt it (its Redis calls time out) and
    // the clients have gone on being served by the other worker.
    proxy.set(Fault::Blackhole);
    let accepted_then = stream.answers.accepted();
    cut_off.wait_for_lines_containing("Redis", 2).await;
    stream
        .wait_until("20 more submits accepted", |a| {
            a.accepted() >= accepted_then + 20
        })
        .await;
    proxy.heal();
    let healed = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 120);
    assert_all_succeed(&env, &accepted, healed + RECOVERY).await;
    assert_up("cut-off worker", &mut cut_off);
    assert_up("other worker", &mut other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_minutes_of_200_ms_latency_on_every_link_leave_every_job_done_once() {
    let env = TestEnv::new(Backend::PgRedis).await;
    // Every process reaches Postgres and Redis through a slow link of its
    // own; leases as in production, since a heartbeat's round trips take
    // more than a second here.
    let mut links = Vec::new();
    let mut through = async |url: &str| {
        let (proxy, url) = FaultProxy::in_front_of(url).await;
        links.push(proxy);
        url
    };
    let (api_database, api_redis) = (
        through(&env.database_url).await,
        through(&env.redis_url).await,
    );
    let (worker_database, worker_redis) = (
        through(&env.database_url).await,
        through(&env.redis_url).await,
    );
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("JOB_LEASE", "30s"),
            ("DATABASE_URL", &api_database),
            ("REDIS_URL", &api_redis),
        ])
        .await;
    let worker_settings = [
        ("JOB_LEASE", "30s"),
        ("DATABASE_URL", worker_database.as_str()),
        ("REDIS_URL", worker_redis.as_str()),
    ];
    let mut workers = [
        started_worker(&env, &worker_settings),
        started_worker(&env, &worker_settings),
    ];

    let slow = Fault::Latency {
        ms: 200,
        jitter_ms: 100,
    };
    for link in &links {
        link.set(slow);
    }
    let slowed = Instant::now();
    let (status, _, took, probe) = submit_once(&api.base, "slow-probe").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let probe = ("slow-probe".to_owned(), probe.expect("the probe's job"));
    assert!(
        took >= Duration::from_millis(400),
        "a submit crosses the slow link there and back at least once: {took:?}"
    );
    let stream = Stream::start(&api.base, 4, 40, 20);
    let mut accepted = stream.accepted().await;
    let submitting = slowed.elapsed();
    // The links stay slow for two minutes in all, whatever the clients'
    // pace was.
    tokio::time::sleep(Duration::from_secs(120).saturating_sub(slowed.elapsed())).await;
    for link in &links {
        link.heal();
    }
    let healed = Instant::now();
    println!(
        "{} jobs accepted in {submitting:?} over slow links",
        accepted.len()
    );
    assert_eq!(accepted.len(), 160);
    accepted.push(probe);
    assert_all_succeed(&env, &accepted, healed + RECOVERY).await;
    for worker in &mut workers {
        assert_up("worker", worker);
    }
}

/// `REQUEST_TIMEOUT` leaves a long poll its whole wait: a `?wait=` longer
/// than the timeout (and than a lease's longest wait) answers the job as
/// it is then, not a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_gets_its_whole_wait_past_the_request_timeout() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "true"), ("REQUEST_TIMEOUT", "1s")])
        .await;
    let job = api.submit("sleep", json!({"ms": 120_000})).await;
    let job_id = job["job_id"].as_str().unwrap();
    api.wait_status(job_id, "RUNNING").await;
    let asked = Instant::now();
    let reply = api.get(&format!("/v1/jobs/{job_id}?wait=35")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json()["status"], "RUNNING");
    assert!(
        asked.elapsed() >= Duration::from_secs(34),
        "{:?}",
        asked.elapsed()
    );
    let cancelled = api
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert!(cancelled.status.is_success(), "{}", cancelled.text);
}
