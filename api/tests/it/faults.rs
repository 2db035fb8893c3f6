//! Infrastructure faults, from outside: a stream of submits by clients that
//! retry their own `Idempotency-Key` after any error, while the test
//! crashes and restarts its own Postgres or Redis (never the shared ones).
//! Every accepted job must succeed soon after the server answers again,
//! with one job per key, and the api and worker processes must stay up.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use testkit::servers::{
    PrivatePostgres, PrivateRedis, take_every_free_connection, terminate_connections,
};

use crate::common::{
    Announcements, Api, Backend, KEY_A, Process, RUNNER_INFO, StoreOf, TestEnv,
    assert_announced_once, redis_at, wait, wait_for_stale_attempts,
};

/// Retrying clients and the jobs they were given.
pub(crate) struct Stream {
    clients: Vec<tokio::task::JoinHandle<Vec<(String, String)>>>,
    pub(crate) answers: std::sync::Arc<Answers>,
}

/// What the stream's clients have been answered so far.
#[derive(Default)]
pub(crate) struct Answers {
    /// 202s.
    accepted: std::sync::atomic::AtomicUsize,
    /// 503s, and requests that got no answer at all.
    refused: std::sync::atomic::AtomicUsize,
}

impl Answers {
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Stream {
    /// `clients` clients submit `per_client` `sleep` jobs of `ms` each, one
    /// after another, each retried with its key until it is accepted.
    pub(crate) fn start(base: &str, clients: usize, per_client: usize, ms: u64) -> Self {
        Self::start_on(&Target::new(base), clients, per_client, ms)
    }

    /// As [`Stream::start`], sending to wherever `target` points at the
    /// moment (an api may be replaced mid-stream).
    pub(crate) fn start_on(target: &Target, clients: usize, per_client: usize, ms: u64) -> Self {
        let answers = std::sync::Arc::new(Answers::default());
        let clients = (0..clients)
            .map(|client| {
                let target = target.clone();
                let answers = answers.clone();
                tokio::spawn(async move {
                    let http = reqwest::Client::builder()
                        .timeout(Duration::from_secs(10))
                        .build()
                        .expect("client");
                    let mut accepted = Vec::new();
                    for n in 0..per_client {
                        let key = format!("client-{client}-job-{n}");
                        let job_id =
                            submit_until_accepted(&http, &target, &answers, &key, ms).await;
                        accepted.push((key, job_id));
                        // A client's pace: one submit every 20 ms or so.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    accepted
                })
            })
            .collect();
        Stream { clients, answers }
    }

    /// Waits (up to 60 s) until `holds` is true of what the clients have
    /// been answered so far: so many accepted (the stream is under way), so
    /// many refused (the clients have felt an outage).
    pub(crate) async fn wait_until(&self, what: &str, holds: impl Fn(&Answers) -> bool) {
        let answers = &self.answers;
        wait::until_true(what, Duration::from_secs(60), async || holds(answers)).await;
    }

    /// Every `(key, job_id)` accepted.
    pub(crate) async fn accepted(self) -> Vec<(String, String)> {
        let mut all = Vec::new();
        for client in self.clients {
            all.extend(client.await.expect("a client"));
        }
        all
    }
}

/// Where clients send their requests: the base URL of an api, which a test
/// may change when it replaces the api.
#[derive(Clone)]
pub(crate) struct Target(std::sync::Arc<std::sync::RwLock<String>>);

impl Target {
    pub(crate) fn new(base: &str) -> Self {
        Target(std::sync::Arc::new(std::sync::RwLock::new(base.to_owned())))
    }

    fn base(&self) -> String {
        self.0.read().unwrap().clone()
    }

    pub(crate) fn point_at(&self, base: &str) {
        *self.0.write().unwrap() = base.to_owned();
    }
}

/// Posts until a 202 comes back; connection errors, timeouts and 5xx are
/// retried with the same key, as a careful client does.
async fn submit_until_accepted(
    http: &reqwest::Client,
    target: &Target,
    answers: &Answers,
    key: &str,
    ms: u64,
) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "{key} not accepted within 120 s");
        let sent = http
            .post(format!("{}/v1/reports/sleep", target.base()))
            .bearer_auth(KEY_A)
            .header("Idempotency-Key", key)
            .json(&json!({ "ms": ms }))
            .send()
            .await;
        match sent {
            Ok(response) if response.status() == StatusCode::ACCEPTED => {
                answers.accepted.fetch_add(1, Relaxed);
                let job: Value = response.json().await.expect("a job object");
                return job["job_id"].as_str().expect("job_id").to_owned();
            }
            Ok(response) if response.status().is_server_error() => {
                let status = response.status();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let retry_after = response.headers().contains_key("retry-after");
                let body = response.text().await.unwrap_or_default();
                assert_eq!(
                    status,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "an outage is a 503, never another 5xx: {body}"
                );
                assert_eq!(content_type.as_deref(), Some("application/problem+json"));
                assert!(retry_after, "a 503 says when to come back: {body}");
                answers.refused.fetch_add(1, Relaxed);
            }
            Ok(response) => {
                let status = response.status();
                panic!(
                    "{key}: {status} {}",
                    response.text().await.unwrap_or_default()
                )
            }
            Err(_) => {
                answers.refused.fetch_add(1, Relaxed);
            }
        }
        // The client's pause before it tries the key again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every job has SUCCEEDED, by `deadline`; then checks there
/// is one job per key.
pub(crate) async fn assert_all_succeed(
    env: &TestEnv,
    accepted: &[(String, String)],
    deadline: Instant,
) {
    let store = env.store().await;
    let mut unfinished: Vec<&str> = accepted.iter().map(|(_, id)| id.as_str()).collect();
    wait::until_ok(
        &format!("{} jobs succeeded", accepted.len()),
        deadline.saturating_duration_since(Instant::now()),
        async || {
            let mut still = Vec::new();
            for job_id in std::mem::take(&mut unfinished) {
                let job = store.get_job_unscoped(job_id).await.ok().flatten();
                match job.as_ref().map(|j| j.status.as_str()) {
                    Some("SUCCEEDED") => {}
                    Some("FAILED" | "CANCELLED") => panic!("job {job_id} did not succeed"),
                    _ => still.push(job_id),
                }
            }
            unfinished = still;
            match unfinished.first() {
                None => Ok(()),
                Some(first) => Err(format!(
                    "{} unfinished, e.g. {:?}",
                    unfinished.len(),
                    store.get_job_unscoped(first).await.ok().flatten()
                )),
            }
        },
    )
    .await;
    let mut job_ids: Vec<&str> = accepted.iter().map(|(_, id)| id.as_str()).collect();
    job_ids.sort_unstable();
    job_ids.dedup();
    assert_eq!(job_ids.len(), accepted.len(), "one job per key");
    let api_jobs = count_jobs(env).await;
    assert_eq!(
        api_jobs,
        accepted.len() as i64,
        "no job beyond the keys' jobs"
    );
}

async fn count_jobs(env: &TestEnv) -> i64 {
    count_where(env, "1 = 1").await
}

async fn count_status_in(database_url: &str, status: &str) -> i64 {
    count_where_in(database_url, &format!("status = '{status}'")).await
}

pub(crate) async fn count_where(env: &TestEnv, condition: &str) -> i64 {
    count_where_in(&env.database_url, condition).await
}

async fn count_where_in(database_url: &str, condition: &str) -> i64 {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(database_url)
        .await
        .expect("the test database");
    let sql = format!("SELECT COUNT(*) FROM jobs WHERE {condition}");
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(&pool)
        .await
        .expect("count");
    pool.close().await;
    n
}

pub(crate) fn assert_up(what: &str, process: &mut Process) {
    assert!(
        process.try_wait().is_none(),
        "the {what} process stayed up through the outage"
    );
}

pub(crate) struct Shape {
    pub(crate) env: TestEnv,
    pub(crate) api: Api,
    pub(crate) worker: Process,
}

pub(crate) async fn production_shape(postgres: &PrivatePostgres, redis: &PrivateRedis) -> Shape {
    production_shape_with(postgres, redis, &[]).await
}

async fn production_shape_with(
    postgres: &PrivatePostgres,
    redis: &PrivateRedis,
    settings: &[(&str, &str)],
) -> Shape {
    let mut env = TestEnv::on_servers(&postgres.admin_url(), &postgres.url(), &redis.url()).await;
    env.extra_env = settings
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    // Started (migrated, connected to its queue) before any fault begins.
    let worker = env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]);
    worker.wait_for_line("metrics on http://");
    Shape { env, api, worker }
}

/// 200 `sleep` jobs of `ms` from retrying clients, with `fault` injected
/// once 50 are accepted; once it returns (the server answers again), every
/// accepted job must succeed within 30 s, one per key, with api and worker
/// still up.
async fn every_job_succeeds_through(shape: &mut Shape, ms: u64, fault: impl AsyncFnOnce(&Stream)) {
    let stream = Stream::start(&shape.api.base, 8, 25, ms);
    stream
        .wait_until("50 submits accepted", |a| a.accepted() >= 50)
        .await;
    fault(&stream).await;
    let back = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 200);
    assert_all_succeed(&shape.env, &accepted, back + Duration::from_secs(30)).await;
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_soon_after_redis_comes_back_empty() {
    let postgres = PrivatePostgres::start();
    let mut redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    // Jobs of 100 ms on 4 slots: a backlog waits in Redis when it dies.
    let database = shape.env.database_url.clone();
    let api = shape.api.with_key(KEY_A);
    every_job_succeeds_through(&mut shape, 100, async |stream| {
        let waiting = count_status_in(&database, "QUEUED").await;
        assert!(
            waiting >= 20,
            "a backlog in the queue when Redis dies ({waiting})"
        );
        // Redis keeps nothing on disk: what the queue held is gone.
        redis.kill();
        // Down until the api has seen it, while the stream still gets
        // its submits accepted (they wait in the outbox).
        let accepted = stream.answers.accepted();
        wait::until_true(
            "the api not ready without its queue",
            Duration::from_secs(30),
            async || api.get("/readyz").await.status == StatusCode::SERVICE_UNAVAILABLE,
        )
        .await;
        stream
            .wait_until("10 submits accepted during the outage", |a| {
                a.accepted() >= accepted + 10
            })
            .await;
        redis.start_again();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_after_redis_restarts_with_its_data() {
    let postgres = PrivatePostgres::start();
    let mut redis = PrivateRedis::start_persistent();
    let mut shape = production_shape(&postgres, &redis).await;
    let queue = shape.env.queue_name.clone();
    let held_key = format!("{queue}:jobs:held");
    let intact_key = format!("{queue}:jobs:intact");
    let worker = shape.worker.pid().to_string();
    let redis_url = redis.url();
    let mut survived = 0;
    let survived_ref = &mut survived;
    every_job_succeeds_through(&mut shape, 100, async |_| {
        // The worker is stopped while Redis dies, so what the queue held
        // just before can be looked for just after.
        signal_pid(&worker, "-STOP");
        let held: Vec<String> = redis::cmd("HKEYS")
            .arg(&held_key)
            .query_async(&mut redis_at(&redis_url).await)
            .await
            .expect("the jobs the queue holds");
        assert!(!held.is_empty(), "a backlog in the queue when Redis dies");
        // Killed, so nothing is flushed at exit: the append-only file,
        // synced on every write, is what brings the queue back.
        redis.kill();
        redis.start_again();
        let mut conn = redis_at(&redis_url).await;
        let still: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(&held_key)
            .arg(&held)
            .query_async(&mut conn)
            .await
            .expect("the jobs the queue holds after");
        let intact: bool = redis::cmd("EXISTS")
            .arg(&intact_key)
            .query_async(&mut conn)
            .await
            .expect("the intact marker");
        assert!(intact, "Redis came back with its data");
        *survived_ref = still.iter().filter(|count| count.is_some()).count();
        assert_eq!(
            *survived_ref,
            held.len(),
            "every message survived the restart"
        );
        signal_pid(&worker, "-CONT");
    })
    .await;
    assert!(survived > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_soon_after_postgres_crashes_and_returns() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    every_job_succeeds_through(&mut shape, 20, async |stream| {
        let refused = stream.answers.refused();
        postgres.crash();
        // Down until the clients have felt it.
        stream
            .wait_until("8 submits refused", |a| a.refused() >= refused + 8)
            .await;
        postgres.start_again();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_503_through_outages_and_everything_resumes_by_itself() {
    let postgres = PrivatePostgres::start();
    let mut redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    let api = &shape.api;
    let first = api.submit("sleep", json!({"ms": 1})).await;
    assert_eq!(
        api.wait_final(first["job_id"].as_str().unwrap()).await["status"],
        "SUCCEEDED"
    );

    // Redis down for longer than any quick restart loop: the queue's
    // consumers fail over and over, the processes stay up.
    redis.kill();
    let ready = api.get("/readyz").await;
    let problem = ready.assert_problem(503);
    assert!(
        problem["detail"].as_str().unwrap_or("").contains("queue"),
        "{problem}"
    );
    // The database still answers: a submit is accepted and waits in the
    // outbox.
    let during_redis = api.submit("sleep", json!({"ms": 1})).await;
    // Down until the worker has failed on Redis over and over.
    shape.worker.wait_for_lines_containing("Redis", 6).await;
    assert_up("worker", &mut shape.worker);
    redis.start_again();

    // Postgres down: what needs it answers 503 problem+json.
    postgres.crash();
    let reply = api.post("/v1/reports/sleep", &json!({"ms": 1})).await;
    reply.assert_problem(503);
    assert!(
        reply.header("retry-after").is_some(),
        "503 with Retry-After"
    );
    let reply = api
        .get(&format!(
            "/v1/jobs/{}",
            during_redis["job_id"].as_str().unwrap()
        ))
        .await;
    reply.assert_problem(503);
    // Down until the worker's relay has failed to read the outbox, and
    // tried again, three times.
    shape
        .worker
        .wait_for_lines_containing("reading the outbox failed", 3)
        .await;
    postgres.start_again();
    let back = Instant::now();

    let after = api.submit("sleep", json!({"ms": 1})).await;
    for job in [&during_redis, &after] {
        let job_id = job["job_id"].as_str().unwrap().to_owned();
        assert_all_succeed_one(&shape.env, &job_id, back + Duration::from_secs(30)).await;
    }
    assert_eq!(api.get("/readyz").await.status, StatusCode::OK);
    let shape = &mut shape;
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
}

async fn assert_all_succeed_one(env: &TestEnv, job_id: &str, deadline: Instant) {
    let store = env.store().await;
    wait::until_ok(
        &format!("{job_id} succeeded"),
        deadline.saturating_duration_since(Instant::now()),
        async || {
            let job = store.get_job_unscoped(job_id).await.ok().flatten();
            match job.as_ref().map(|j| j.status.as_str()) {
                Some("SUCCEEDED") => Ok(()),
                _ => Err(job),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_killed_mid_burst_makes_one_job_per_key_on_the_next_api() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    let target = Target::new(&shape.api.base);

    let stream = Stream::start_on(&target, 8, 25, 20);
    stream
        .wait_until("50 submits accepted", |a| a.accepted() >= 50)
        .await;
    shape.api.process.as_mut().expect("api").kill_hard();
    // Clients retry their keys against a new api (another port: a new
    // address behind the same name, as after a redeploy).
    let next = shape.env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    target.point_at(&next.base);
    let back = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 200);
    assert_all_succeed(&shape.env, &accepted, back + Duration::from_secs(30)).await;
    assert_up("worker", &mut shape.worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_twice_mid_stream_leave_every_job_succeeded() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    let mut second = shape.env.start_worker(&[]);

    let stream = Stream::start(&shape.api.base, 8, 25, 100);
    // Each worker is killed with jobs running, once jobs have been
    // succeeding for a while.
    let succeeded = async |n: i64| {
        wait::until_true(
            &format!("{n} jobs succeeded"),
            Duration::from_secs(60),
            async || count_where(&shape.env, "status = 'SUCCEEDED'").await >= n,
        )
        .await;
    };
    succeeded(30).await;
    shape.worker.kill_hard();
    let _third = shape.env.start_worker(&[]);
    succeeded(60).await;
    second.kill_hard();
    let killed = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 200);
    // A killed worker's jobs wait for their leases (JOB_LEASE, 3 s here).
    assert_all_succeed(&shape.env, &accepted, killed + Duration::from_secs(40)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_that_wakes_after_its_lease_overwrites_nothing() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let settings = [("WEBHOOK_ALLOW_PRIVATE", "true"), RUNNER_INFO];
    let shape = production_shape_with(&postgres, &redis, &settings).await;
    let api = &shape.api;
    let announced = Announcements::start();
    announced.subscribe(api).await;
    let job_id = api.submit("sleep", json!({"ms": 2000})).await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    api.wait_status(&job_id, "RUNNING").await;

    // Frozen past its lease (3 s): another worker takes the job over.
    signal(&shape.worker, "-STOP");
    let _other = shape.env.start_worker(&[]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();

    // It wakes, and its attempt ends without writing: it finds its lease
    // taken, or its outcome is fenced off.
    signal(&shape.worker, "-CONT");
    wait_for_stale_attempts(&shape.worker, 1).await;
    let after = api.job(&job_id).await;
    assert_eq!(after["status"], "SUCCEEDED");
    assert_eq!(after["attempts"], 2);
    assert_eq!(
        after["finished_at"], done["finished_at"],
        "nothing rewritten"
    );
    let result_after = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(result_after, result, "the result is the second attempt's");
    assert_eq!(result_after["attempt"], 2);
    assert_announced_once(&announced, api, &[&job_id], "job.succeeded").await;
}

fn signal(process: &Process, signal: &str) {
    process.signal(signal);
}

fn signal_pid(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("kill");
    assert!(status.success());
}

// ------------------------------------------------------------- deploys

async fn five_deploys_during_one_long_job_do_not_use_up_its_attempts(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let job_id = api.submit("sleep", json!({"ms": 4000})).await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Six deploys, each stopping the worker with a grace the job outlasts:
    // more hand-backs than the kind has attempts.
    for deploy in 1..=6 {
        let mut worker = env.start_worker(&[("SHUTDOWN_GRACE", "200ms")]);
        api.wait_status(&job_id, "RUNNING").await;
        let status = worker.terminate().expect("the worker exits");
        assert!(status.success(), "exit status {status}");
        let job = api.job(&job_id).await;
        assert_eq!(
            job["status"], "QUEUED",
            "deploy {deploy}: handed back: {job}"
        );
        assert_eq!(
            job["attempts"], 0,
            "deploy {deploy}: no attempt used: {job}"
        );
    }
    let _worker = env.start_worker(&[]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

async fn the_embedded_api_stops_within_its_shutdown_grace(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // One long poll at a time: a second one refused shows the first is in
    // flight.
    let mut api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("SHUTDOWN_GRACE", "2s"),
            ("MAX_LONG_POLLS", "1"),
        ])
        .await;
    let job_id = api.submit("sleep", json!({"ms": 30000})).await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    api.wait_status(&job_id, "RUNNING").await;
    // A long poll in flight must not hold the shutdown up. Of two sent at
    // once, one is refused at once; the other is then in flight.
    let mut long_polls: futures::stream::FuturesUnordered<_> = (0..2)
        .map(|_| {
            let request = api
                .client
                .get(api.url(&format!("/v1/jobs/{job_id}?wait=60")))
                .bearer_auth(&api.key);
            tokio::spawn(request.send())
        })
        .collect();
    let refused = {
        use futures::StreamExt;
        long_polls.next().await.expect("a long poll").unwrap()
    };
    assert_eq!(
        refused.expect("an answer").status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the second long poll is refused while the first waits"
    );
    let long_poll = long_polls.into_iter().next().expect("the other long poll");

    let started = Instant::now();
    let mut process = api.process.take().expect("api process");
    let status = tokio::task::spawn_blocking(move || process.terminate())
        .await
        .unwrap()
        .expect("the api exits");
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        took < Duration::from_millis(3500),
        "exited {took:?} after SIGTERM with a grace of 2 s"
    );
    let answered = long_poll
        .await
        .unwrap()
        .expect("the long poll was answered");
    assert_eq!(answered.status(), StatusCode::OK);
    let job = env
        .store()
        .await
        .get_job_unscoped(&job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        job.status.as_str(),
        "QUEUED",
        "handed back for the next start"
    );
    assert_eq!(job.attempts, 0, "a hand-back is not a counted attempt");
}

crate::on_both_backends!(
    five_deploys_during_one_long_job_do_not_use_up_its_attempts,
    the_embedded_api_stops_within_its_shutdown_grace,
);

/// The production shape (api and worker apart) through PgBouncer in
/// transaction mode with 4 server connections for every client: retrying
/// clients submit 200 jobs with their keys; each key's job succeeds in one
/// attempt, and replaying a key gives its job back.
async fn every_job_runs_once_through_pgbouncer(redis: bool) {
    crate::common::through_pgbouncer(async {
        let env = TestEnv::new(Backend::PgRedis).await;
        let env = if redis { env } else { env.without_redis() };
        let mut api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
        let mut worker = env.start_worker(&[]);
        let accepted = Stream::start(&api.base, 8, 25, 5).accepted().await;
        assert_all_succeed(&env, &accepted, Instant::now() + Duration::from_secs(60)).await;
        let store = env.store().await;
        for (_, job_id) in &accepted {
            let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
            assert_eq!(job.attempts, 1, "{job_id} ran once");
        }
        let (key, job_id) = &accepted[0];
        let replay = api
            .client
            .post(api.url("/v1/reports/sleep"))
            .bearer_auth(KEY_A)
            .header("Idempotency-Key", key)
            .json(&json!({ "ms": 5 }))
            .send()
            .await
            .expect("replay");
        assert_eq!(replay.status(), StatusCode::ACCEPTED);
        let replayed: Value = replay.json().await.expect("a job object");
        assert_eq!(replayed["job_id"].as_str(), Some(job_id.as_str()));
        assert_up("worker", &mut worker);
        assert_up("api", api.process.as_mut().expect("api"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_runs_once_through_pgbouncer_in_transaction_mode() {
    every_job_runs_once_through_pgbouncer(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_runs_once_through_pgbouncer_with_the_queue_in_postgres() {
    every_job_runs_once_through_pgbouncer(false).await;
}

/// Every accepted job (each SUCCEEDED, see [`assert_all_succeed`]) was
/// announced exactly once, as succeeded; returns how many took more than
/// one attempt (an attempt whose store calls meet an outage fails
/// retryably and leaves no result).
async fn assert_succeeded_once_each(
    shape: &Shape,
    announced: &Announcements,
    accepted: &[(String, String)],
) -> usize {
    let store = shape.env.store().await;
    let mut retried = 0;
    for (_, job_id) in accepted {
        let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
        assert!(
            job.attempts >= 1 && job.attempts <= job.max_attempts,
            "{job:?}"
        );
        if job.attempts > 1 {
            retried += 1;
        }
    }
    let job_ids: Vec<&str> = accepted.iter().map(|(_, id)| id.as_str()).collect();
    assert_announced_once(announced, &shape.api, &job_ids, "job.succeeded").await;
    retried
}

/// The production shape, delivering every final status to a receiver.
async fn announcing_shape(
    postgres: &PrivatePostgres,
    redis: &PrivateRedis,
) -> (Shape, Announcements) {
    let shape = production_shape_with(postgres, redis, &[("WEBHOOK_ALLOW_PRIVATE", "true")]).await;
    let announced = Announcements::start();
    announced.subscribe(&shape.api).await;
    (shape, announced)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_once_after_another_client_held_every_connection() {
    // 40 connections, 3 for superusers: the api and the worker open theirs
    // as needed, so a client taking the rest leaves them short.
    let postgres = PrivatePostgres::start_with_max_connections(40);
    let redis = PrivateRedis::start();
    let (mut shape, announced) = announcing_shape(&postgres, &redis).await;
    let held = take_every_free_connection(&postgres.admin_url()).await;
    assert!(!held.is_empty());
    let stream = Stream::start(&shape.api.base, 8, 25, 5);
    // Held until the clients have felt the shortage, or got through it.
    stream
        .wait_until("8 submits refused, or all accepted", |a| {
            a.refused() >= 8 || a.accepted() == 200
        })
        .await;
    drop(held);
    let back = Instant::now();
    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 200);
    assert_all_succeed(&shape.env, &accepted, back + Duration::from_secs(30)).await;
    let retried = assert_succeeded_once_each(&shape, &announced, &accepted).await;
    eprintln!("{retried} of {} jobs took a second attempt", accepted.len());
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_once_while_its_connections_are_terminated_five_times_a_second() {
    use sqlx::Connection;
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let (mut shape, announced) = announcing_shape(&postgres, &redis).await;
    let database = shape.env.queue_name.clone();
    // 400 jobs: about as many as the clients submit while the cuts last;
    // more only measures how fast a debug build drains a backlog on a
    // loaded machine.
    let stream = Stream::start(&shape.api.base, 8, 50, 5);
    let mut killer = sqlx::PgConnection::connect(&postgres.admin_url())
        .await
        .expect("the test's own Postgres");
    let mut terminated = 0_i64;
    for _ in 0..25 {
        let n = terminate_connections(&mut killer, &database).await;
        terminated += n;
        // The fault's rate (five cuts a second), not a wait for anything.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        terminated > 25,
        "Receipt's connections were cut ({terminated})"
    );
    let back = Instant::now();
    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 400);
    assert_all_succeed(&shape.env, &accepted, back + Duration::from_secs(30)).await;
    let retried = assert_succeeded_once_each(&shape, &announced, &accepted).await;
    eprintln!("{retried} of {} jobs took a second attempt", accepted.len());
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_postgres_is_down_waits_for_it_and_then_works() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    shape.worker.kill_hard();
    postgres.crash();
    let mut worker = shape.env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]);
    worker.wait_for_line_containing("cannot start yet: trying again");
    assert_up("worker", &mut worker);
    postgres.start_again();
    worker.wait_for_line("metrics on http://");
    let job = shape.api.submit("sleep", json!({"ms": 1})).await;
    let done = shape
        .api
        .wait_final(job["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
}
