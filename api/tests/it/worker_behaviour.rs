//! How workers run jobs when things go wrong: cancels in every state,
//! retries, a worker killed mid-job, stale attempts fenced off, graceful
//! shutdown, and garbage on the queue.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::ids::new_job_id;
use shared::{
    model::{AttemptOutcome, JobErrorObject, JobStatus, ResultBody},
    time::now_ms,
};
use sqlx::Row;
use store::{LeaseCheck, NewJob, NewWebhook, Registration, Store, SuccessWrite, WebhookCaps};

use crate::common::{
    Announcements, Api, Backend, Process, RUNNER_INFO, StoreOf, TestEnv, assert_announced_once,
    metrics_url, run_a_later_job, wait, wait_for_stale_attempts,
};

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

fn cancel_path(job_id: &str) -> String {
    format!("/v1/jobs/{job_id}/cancel")
}

/// The `worker_id` column of a job: `{QUEUE_NAME}-{pid}-{ulid}` of the
/// worker process running it, or `None` when no attempt is running.
async fn worker_id_of(env: &TestEnv, job_id: &str) -> Option<String> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&env.database_url)
        .await
        .expect("the test database");
    let row = sqlx::query("SELECT worker_id FROM jobs WHERE job_id = $1")
        .bind(job_id)
        .fetch_one(&pool)
        .await
        .expect("the job row");
    let worker_id = row.try_get("worker_id").expect("worker_id");
    pool.close().await;
    worker_id
}

/// The job has settled on its final status: a job submitted after it ran
/// to its end (so the pool has taken every message queued before), and no
/// outbox row is left that could publish it again later.
async fn assert_settled(env: &TestEnv, api: &Api, job_id: &str) {
    run_a_later_job(api).await;
    let left = env
        .count(&format!(
            "SELECT COUNT(*) FROM outbox WHERE job_id = '{job_id}'"
        ))
        .await;
    assert_eq!(left, 0, "{job_id} still has an outbox row");
}

fn time_ms(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().expect("a time"))
        .expect("RFC 3339")
        .timestamp_millis()
}

// ---------------------------------------------------------------- cancel

async fn cancelling_a_queued_job_cancels_it_at_once_and_it_never_runs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // No worker anywhere: the job stays QUEUED (the relay may still publish
    // its message, which the worker started below must then ignore).
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job_id = id_of(&api.submit("sleep", json!({"ms": 50})).await);

    let reply = api.post(&cancel_path(&job_id), &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let cancelled = reply.json();
    assert_eq!(cancelled["status"], "CANCELLED");
    assert_eq!(cancelled["attempts"], 0);
    assert_eq!(cancelled["cancel_requested"], false);
    assert!(cancelled["finished_at"].is_string());
    assert_eq!(api.job(&job_id).await["status"], "CANCELLED");

    let _worker = env.start_worker(&[]);
    // A job submitted after the cancelled one running to the end shows the
    // worker is up and has had the cancelled job's message before it.
    let later = id_of(&api.submit("sleep", json!({"ms": 50})).await);
    assert_eq!(api.wait_final(&later).await["status"], "SUCCEEDED");

    let job = api.job(&job_id).await;
    assert_eq!(job["status"], "CANCELLED");
    assert_eq!(job["attempts"], 0, "the cancelled job was never claimed");
    assert!(job["started_at"].is_null());
    let store = env.store().await;
    assert_eq!(store.count_results(&job_id).await.unwrap(), 0);
    api.get(&format!("/v1/jobs/{job_id}/result"))
        .await
        .assert_problem(409);
}

async fn cancelling_a_running_job_stops_it_at_its_next_checkpoint(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let job_id = id_of(&api.submit("sleep", json!({"ms": 10000})).await);
    api.wait_status(&job_id, "RUNNING").await;

    let reply = api.post(&cancel_path(&job_id), &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let asked = reply.json();
    assert_eq!(asked["status"], "RUNNING", "a running job stops later");
    assert_eq!(asked["cancel_requested"], true);

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "CANCELLED");
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["cancel_requested"], false, "it has stopped");
    assert!(done["result_url"].is_null());
    assert!(done["error"].is_null());
    assert!(done["finished_at"].is_string());
    api.get(&format!("/v1/jobs/{job_id}/result"))
        .await
        .assert_problem(409);
    assert_eq!(env.store().await.count_results(&job_id).await.unwrap(), 0);

    // Cancelling again is idempotent.
    let again = api.post(&cancel_path(&job_id), &json!({})).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.json()["status"], "CANCELLED");
    assert_eq!(again.json()["finished_at"], done["finished_at"]);
}

async fn cancelling_a_finished_job_is_a_conflict(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let succeeded = id_of(&api.submit("sleep", json!({"ms": 10})).await);
    let failed = id_of(
        &api.submit(
            "sleep",
            json!({"ms": 10, "fail_times": 1, "permanent": true}),
        )
        .await,
    );
    assert_eq!(api.wait_final(&succeeded).await["status"], "SUCCEEDED");
    assert_eq!(api.wait_final(&failed).await["status"], "FAILED");

    for (job_id, status) in [(&succeeded, "SUCCEEDED"), (&failed, "FAILED")] {
        api.post(&cancel_path(job_id), &json!({}))
            .await
            .assert_problem(409);
        assert_eq!(api.job(job_id).await["status"], status, "unchanged");
    }
    let result = api.get(&format!("/v1/jobs/{succeeded}/result")).await;
    assert_eq!(result.status, StatusCode::OK, "the result is still served");
}

// --------------------------------------------------------------- retries

async fn a_job_failing_twice_succeeds_on_its_third_attempt(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let job_id = id_of(
        &api.submit("sleep", json!({"ms": 10, "fail_times": 2}))
            .await,
    );

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["attempts"], 3);
    assert!(done["error"].is_null());
    assert!(done["next_attempt_at"].is_null());
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await;
    assert_eq!(result.status, StatusCode::OK);
    assert_eq!(result.json()["attempt"], 3);
    // One final status, announced once: the failed attempts announced
    // nothing.
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

async fn a_job_that_keeps_failing_fails_after_five_attempts_with_its_last_error(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let job_id = id_of(
        &api.submit("sleep", json!({"ms": 10, "fail_times": 99}))
            .await,
    );

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "FAILED");
    assert_eq!(done["attempts"], 5, "docs/api.md: 5 attempts by default");
    assert_eq!(done["error"]["type"], "diagnostic_failure");
    let message = done["error"]["message"].as_str().expect("error.message");
    assert!(message.contains("attempt 5"), "the last error: {message}");
    assert!(done["result_url"].is_null());
    assert!(done["next_attempt_at"].is_null());
    assert!(done["finished_at"].is_string());
    api.get(&format!("/v1/jobs/{job_id}/result"))
        .await
        .assert_problem(409);

    // Settled: no sixth attempt comes later.
    assert_settled(&env, &api, &job_id).await;
    let later = api.job(&job_id).await;
    assert_eq!(later["status"], "FAILED");
    assert_eq!(later["attempts"], 5);
}

async fn a_job_waiting_for_its_retry_is_queued_with_next_attempt_at(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // A first backoff of 1 to 2 s (2 s with equal jitter): long enough to see.
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("RETRY_BASE_DELAY", "2s"),
            ("RETRY_MAX_DELAY", "10s"),
        ])
        .await;
    let job_id = id_of(&api.submit("sleep", json!({"ms": 0, "fail_times": 1})).await);

    let waiting = api
        .wait_job(&job_id, "the first attempt's failure", |job| {
            job["attempts"] == 1 && job["status"] != "RUNNING"
        })
        .await;
    assert_eq!(waiting["status"], "QUEUED", "{waiting}");
    assert!(waiting["error"].is_null(), "error is set only once FAILED");
    assert!(waiting["finished_at"].is_null());
    let next = &waiting["next_attempt_at"];
    assert!(next.is_string(), "next_attempt_at while waiting: {waiting}");
    let backoff = time_ms(next) - time_ms(&waiting["started_at"]);
    assert!(
        backoff >= 1000,
        "the retry waits at least half the 2 s base: {backoff} ms"
    );

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["attempts"], 2);
    assert!(done["next_attempt_at"].is_null());
}

// ----------------------------------------------------------------- crash

async fn a_job_whose_worker_is_killed_is_finished_by_another_worker(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let mut workers = [
        env.start_worker(&[("JOB_LEASE", "2s")]),
        env.start_worker(&[("JOB_LEASE", "2s")]),
    ];
    let job_id = id_of(&api.submit("sleep", json!({"ms": 4000})).await);
    api.wait_status(&job_id, "RUNNING").await;

    let worker_id = worker_id_of(&env, &job_id)
        .await
        .expect("a running job names its worker");
    let victim = workers
        .iter()
        .position(|w| worker_id.contains(&format!("-{}-", w.pid())))
        .unwrap_or_else(|| panic!("{worker_id} is neither worker's"));
    workers[victim].kill_hard();

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert!(done["attempts"].as_i64().unwrap() >= 2, "{done}");
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(
        result["attempt"], done["attempts"],
        "the last attempt's result"
    );
    assert!(
        workers[1 - victim].try_wait().is_none(),
        "the survivor is still running"
    );
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

// -------------------------------------------------------------- fencing

fn new_sleep_job() -> NewJob {
    NewJob {
        job_id: new_job_id(),
        tenant_id: "tenant-a".into(),
        kind: "sleep".into(),
        params: r#"{"ms": 1}"#.into(),
        max_attempts: 5,
        priority: Default::default(),
        external: false,
    }
}

/// Ends an attempt with a result, through the group commit of successes
/// as the runner does; whether it applied.
async fn succeed(store: &Store, job_id: &str, attempt: i64, body: Value) -> store::Result<bool> {
    let applied = store
        .finish_succeeded(&[SuccessWrite::new(
            job_id.to_owned(),
            attempt,
            ResultBody::Document(body.to_string()),
        )])
        .await?;
    Ok(applied == [true])
}

async fn migrated_store(env: &TestEnv) -> Store {
    let store = env.store().await;
    store.migrate().await.expect("migrate");
    store
}

/// Registers a webhook for every final status of one job; returns its id.
async fn webhook_for(store: &Store, job_id: &str) -> String {
    let new = NewWebhook {
        tenant_id: "tenant-a".into(),
        url: "https://receiver.example/hooks".into(),
        events: ["job.succeeded", "job.failed", "job.cancelled"]
            .map(String::from)
            .to_vec(),
        job_id: Some(job_id.to_owned()),
    };
    let caps = WebhookCaps {
        per_tenant: 10,
        per_job: 10,
    };
    let mut tx = store.begin_write().await.unwrap();
    let registered = store.register_webhook(&mut tx, &new, caps).await.unwrap();
    tx.commit().await.unwrap();
    match registered {
        Registration::Registered(webhook) => webhook.webhook_id,
        other => panic!("not registered: {other:?}"),
    }
}

/// The events written for a webhook: one per final status it announces.
/// Nothing keys them by job, so a second final write would show here.
async fn events_for(env: &TestEnv, webhook_id: &str) -> i64 {
    env.count(&format!(
        "SELECT COUNT(*) FROM webhook_events WHERE webhook_id = '{webhook_id}'"
    ))
    .await
}

async fn a_stale_attempt_cannot_overwrite_the_current_one(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = migrated_store(&env).await;
    let job = store.submit_job(&new_sleep_job()).await.unwrap();
    let job_id = job.job_id.as_str();
    let webhook = webhook_for(&store, job_id).await;
    let lease = || now_ms() + 60_000;

    let first = store
        .claim_attempt(job_id, "worker-1", lease())
        .await
        .unwrap()
        .expect("the first claim wins");
    assert_eq!(first.attempt, 1);
    store.expire_lease_now(job_id).await.unwrap();
    let (requeued, failed) = store.requeue_lapsed_leases(100).await.unwrap();
    assert_eq!((requeued, failed.len()), (1, 0));
    let second = store
        .claim_attempt(job_id, "worker-2", lease())
        .await
        .unwrap()
        .expect("the lapsed job is claimable again");
    assert_eq!(second.attempt, 2);

    // Attempt 1 has lost its lease: its every write is refused.
    assert_eq!(
        store.heartbeat(job_id, 1, lease()).await.unwrap(),
        LeaseCheck::Lost
    );
    assert_eq!(
        store.set_progress(job_id, 1, 0.5).await.unwrap(),
        LeaseCheck::Lost
    );
    assert_eq!(
        store.heartbeat(job_id, 2, lease()).await.unwrap(),
        LeaseCheck::Held {
            cancel_requested: false
        }
    );
    let stale = succeed(&store, job_id, 1, json!({"from": 1}))
        .await
        .unwrap();
    assert!(!stale, "attempt 1's outcome is dropped");
    let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!(job.attempts, 2);
    assert_eq!(store.count_results(job_id).await.unwrap(), 0);

    assert!(
        succeed(&store, job_id, 2, json!({"from": 2}))
            .await
            .unwrap(),
        "the current attempt's outcome applies"
    );
    // A second finish of the same attempt (a duplicate) changes nothing.
    assert!(
        !succeed(&store, job_id, 2, json!({"from": "again"}))
            .await
            .unwrap()
    );
    let failure = AttemptOutcome::Failed {
        error: JobErrorObject {
            error_type: "late".into(),
            message: "too late".into(),
            details: None,
        },
    };
    assert!(
        !store
            .finish_attempt(job_id, 2, &failure, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish_attempt(job_id, 1, &failure, None)
            .await
            .unwrap()
    );

    let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 2);
    assert!(job.error_type.is_none());
    assert_eq!(events_for(&env, &webhook).await, 1, "one final write");
    let body = store.job_result("tenant-a", job_id).await.unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["from"], 2);
    // Once finished, no attempt holds the job.
    assert_eq!(
        store.heartbeat(job_id, 2, lease()).await.unwrap(),
        LeaseCheck::Lost
    );
    assert_eq!(
        store.set_progress(job_id, 2, 0.1).await.unwrap(),
        LeaseCheck::Lost
    );
}

async fn a_duplicate_delivery_claims_the_job_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = migrated_store(&env).await;
    let lease = now_ms() + 60_000;

    let job = store.submit_job(&new_sleep_job()).await.unwrap();
    let first = store.claim_attempt(&job.job_id, "worker-1", lease).await;
    let second = store.claim_attempt(&job.job_id, "worker-2", lease).await;
    assert_eq!(first.unwrap().expect("the first claim wins").attempt, 1);
    assert!(second.unwrap().is_none(), "the duplicate gets nothing");

    // Two deliveries at the same moment: still exactly one claim.
    let job = store.submit_job(&new_sleep_job()).await.unwrap();
    let (a, b) = tokio::join!(
        store.claim_attempt(&job.job_id, "worker-1", lease),
        store.claim_attempt(&job.job_id, "worker-2", lease),
    );
    let claims: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0].attempt, 1);
    let job = store.get_job_unscoped(&job.job_id).await.unwrap().unwrap();
    assert_eq!(job.attempts, 1);
    assert_eq!(job.status, JobStatus::Running);
}

/// Group commits keep every guard of the single writes: a job delivered
/// twice into one batch is claimed once, and a stale attempt ending in the
/// same batch as the current one is dropped.
async fn a_group_commit_fences_each_of_its_writes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = migrated_store(&env).await;
    let lease = now_ms() + 60_000;
    let a = store.submit_job(&new_sleep_job()).await.unwrap().job_id;
    let b = store.submit_job(&new_sleep_job()).await.unwrap().job_id;
    let webhook_of_a = webhook_for(&store, &a).await;

    let claims = store
        .claim_attempts(
            &[a.clone(), b.clone(), a.clone()],
            "worker-1",
            lease,
            &Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(claims.len(), 3);
    assert_eq!(claims[0].as_ref().expect("a's first delivery").attempt, 1);
    assert_eq!(claims[1].as_ref().expect("b").attempt, 1);
    assert!(claims[2].is_none(), "a's second delivery gets nothing");

    // a's first attempt loses its lease; a second attempt takes over.
    store.expire_lease_now(&a).await.unwrap();
    store.requeue_lapsed_leases(10).await.unwrap();
    let second = store
        .claim_attempt(&a, "worker-2", lease)
        .await
        .unwrap()
        .expect("a's second attempt");
    assert_eq!(second.attempt, 2);

    let applied = store
        .finish_succeeded(&[
            SuccessWrite::new(a.clone(), 1, r#"{"from":"stale"}"#.into()),
            SuccessWrite::new(b.clone(), 1, r#"{"from":"b"}"#.into()),
            SuccessWrite::new(a.clone(), 2, r#"{"from":"current"}"#.into()),
        ])
        .await
        .unwrap();
    assert_eq!(applied, [false, true, true]);
    let result = store.job_result("tenant-a", &a).await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&result).unwrap(),
        json!({"from": "current"})
    );
    for job_id in [&a, &b] {
        let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Succeeded);
    }
    // Both again: already finished, so neither applies.
    let again = store
        .finish_succeeded(&[
            SuccessWrite::new(a.clone(), 2, "{}".into()),
            SuccessWrite::new(b.clone(), 1, "{}".into()),
        ])
        .await
        .unwrap();
    assert_eq!(again, [false, false]);
    assert_eq!(
        events_for(&env, &webhook_of_a).await,
        1,
        "a's one final write"
    );
}

async fn a_success_is_recorded_after_a_retry_on_the_same_connection(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // One operation at a time: the pool reuses one connection throughout,
    // so the success is written where the retry's statement was prepared.
    let store = migrated_store(&env).await;
    let job = store.submit_job(&new_sleep_job()).await.unwrap();
    let job_id = job.job_id.as_str();
    let lease = now_ms() + 60_000;

    let first = store
        .claim_attempt(job_id, "w", lease)
        .await
        .unwrap()
        .unwrap();
    let retry = AttemptOutcome::RetryAt {
        at: now_ms(),
        error: JobErrorObject {
            error_type: "flaky".into(),
            message: "try again".into(),
            details: None,
        },
    };
    assert!(
        store
            .finish_attempt(job_id, first.attempt, &retry, None)
            .await
            .unwrap()
    );
    let second = store
        .claim_attempt(job_id, "w", lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.attempt, 2);
    let applied = succeed(&store, job_id, second.attempt, json!({"ok": true}))
        .await
        .expect("the success is written");
    assert!(applied);

    let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.progress, Some(1.0));
    let result = store.job_result("tenant-a", job_id).await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&result).unwrap(),
        json!({"ok": true}),
        "the success's result is stored"
    );
}

/// Takes the running job's lease away from the test, as the sweeper would
/// after a stall; retries because a heartbeat landing between the two
/// steps extends the lease again.
pub(crate) async fn force_lease_lapse(store: &Store, job_id: &str) {
    wait::until_true(
        &format!("the lease of {job_id} taken away"),
        Duration::from_secs(10),
        async || {
            store.expire_lease_now(job_id).await.unwrap();
            store.requeue_lapsed_leases(100).await.unwrap();
            let job = store.get_job_unscoped(job_id).await.unwrap().unwrap();
            job.attempts > 1 || job.status != JobStatus::Running
        },
    )
    .await;
}

async fn a_job_whose_lease_lapses_mid_attempt_succeeds_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // The lease is taken away below. One of 9 s is beaten every 3 s, so
    // the first attempt's heartbeat still comes before its 4 s sleep ends,
    // and a loaded machine's late heartbeat does not lose the second too.
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
            ("JOB_LEASE", "9s"),
            RUNNER_INFO,
        ])
        .await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let store = env.store().await;
    let job_id = id_of(&api.submit("sleep", json!({"ms": 4000})).await);
    let running = api.wait_status(&job_id, "RUNNING").await;
    assert_eq!(running["attempts"], 1);

    // Attempt 1 is alive but has lost its lease: a second attempt runs
    // while the first is still sleeping; its heartbeat sees it lost.
    force_lease_lapse(&store, &job_id).await;

    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 2);
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(
        result["attempt"], 2,
        "the stale attempt's result was dropped"
    );
    // Attempt 1 has ended, and wrote no second final status.
    wait_for_stale_attempts(api.process.as_ref().expect("the api"), 1).await;
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

// ------------------------------------------------------------- shutdown

async fn a_terminated_worker_finishes_its_running_job_and_exits_cleanly(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let mut worker = env.start_worker(&[("SHUTDOWN_GRACE", "10s")]);
    let job_id = id_of(&api.submit("sleep", json!({"ms": 1000})).await);
    api.wait_status(&job_id, "RUNNING").await;

    let status = worker.terminate().expect("the worker exits after SIGTERM");
    assert!(status.success(), "exit status {status}");
    let job = api.job(&job_id).await;
    assert_eq!(job["status"], "SUCCEEDED", "finished before exiting: {job}");
    assert_eq!(job["attempts"], 1);
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(result["attempt"], 1);
    // Another worker delivers what the first did not; still one success.
    let _next = env.start_worker(&[]);
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

async fn a_job_outlasting_the_shutdown_grace_is_handed_back_and_run_again(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let mut worker = env.start_worker(&[("SHUTDOWN_GRACE", "1s")]);
    let job_id = id_of(&api.submit("sleep", json!({"ms": 5000})).await);
    api.wait_status(&job_id, "RUNNING").await;

    let status = worker
        .terminate()
        .expect("the worker exits after its grace");
    assert!(status.success(), "exit status {status}");
    let job = api.job(&job_id).await;
    assert_eq!(job["status"], "QUEUED", "handed back at once: {job}");
    assert_eq!(job["attempts"], 0, "a hand-back is not a counted attempt");

    let _next = env.start_worker(&[]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 1);
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

/// A path where no file is yet, in a folder that lasts as long as the
/// returned handle: a gate a failpoint holds a step at until it opens.
fn a_closed_gate() -> (tempfile::TempDir, std::path::PathBuf) {
    let folder = tempfile::tempdir().expect("a folder for the gate");
    let gate = folder.path().join("open");
    (folder, gate)
}

/// Waits for each job to end, and checks it succeeded at its first attempt.
async fn each_succeeds_once(api: &Api, job_ids: &[&String]) {
    for job_id in job_ids {
        let done = api.wait_final(job_id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 1, "{done}");
    }
}

/// A worker whose first outcome is held at a failpoint until `gate` exists.
fn worker_holding_its_first_outcome(env: &TestEnv, gate: &std::path::Path) -> Process {
    let held = format!("worker::outcome_held_until=1*return({})", gate.display());
    env.start_worker(&[
        ("WORKER_CONCURRENCY", "1"),
        ("SHUTDOWN_GRACE", "30s"),
        ("FAILPOINTS", &held),
        RUNNER_INFO,
    ])
}

/// A slot whose attempt has run takes its next job while that attempt's
/// outcome is still being written (held at a failpoint here).
async fn a_slot_claims_its_next_job_while_the_last_outcome_is_written(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let (_gate_folder, gate) = a_closed_gate();
    let _worker = worker_holding_its_first_outcome(&env, &gate);
    let first = id_of(&api.submit("sleep", json!({"ms": 1})).await);
    api.wait_status(&first, "RUNNING").await;
    let second = id_of(&api.submit("sleep", json!({"ms": 1})).await);
    api.wait_status(&second, "RUNNING").await;
    let held = api.job(&first).await;
    assert_eq!(held["status"], "RUNNING", "its outcome is held: {held}");

    std::fs::write(&gate, b"").expect("the gate opens");
    each_succeeds_once(&api, &[&first, &second]).await;
}

/// A stopping worker waits for the outcome it is writing before it exits.
async fn a_stopping_worker_writes_the_outcome_it_holds_before_it_exits(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let (_gate_folder, gate) = a_closed_gate();
    let mut worker = worker_holding_its_first_outcome(&env, &gate);
    let job_id = id_of(&api.submit("sleep", json!({"ms": 1})).await);
    api.wait_status(&job_id, "RUNNING").await;

    worker.signal("-TERM");
    worker.wait_for_line_containing("waiting for the outcomes being written");
    std::fs::write(&gate, b"").expect("the gate opens");
    let status = worker.wait_exit();
    assert!(status.success(), "exit status {status}");
    let job = api.job(&job_id).await;
    assert_eq!(job["status"], "SUCCEEDED", "written before the exit: {job}");
    assert_eq!(job["attempts"], 1, "{job}");
}

/// Running jobs and outcomes being written share one `SHUTDOWN_GRACE`: a
/// worker with a job outlasting it and an outcome that cannot be written
/// exits after the grace, not after twice it, and hands both attempts back.
async fn running_jobs_and_held_outcomes_share_one_shutdown_grace(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let (_gate_folder, never_opened) = a_closed_gate();
    let held = format!(
        "worker::outcome_held_until=1*return({})",
        never_opened.display()
    );
    let mut worker = env.start_worker(&[
        ("WORKER_CONCURRENCY", "2"),
        ("SHUTDOWN_GRACE", "2s"),
        ("FAILPOINTS", &held),
        RUNNER_INFO,
    ]);
    let held_outcome = id_of(&api.submit("sleep", json!({"ms": 1})).await);
    api.wait_status(&held_outcome, "RUNNING").await;
    let outlasting = id_of(&api.submit("sleep", json!({"ms": 5000})).await);
    api.wait_status(&outlasting, "RUNNING").await;

    let started = std::time::Instant::now();
    let status = worker.terminate().expect("the worker exits");
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        took < Duration::from_millis(3500),
        "exited {took:?} after SIGTERM with a grace of 2 s"
    );
    for job_id in [&held_outcome, &outlasting] {
        let job = api.job(job_id).await;
        assert_eq!(job["status"], "QUEUED", "handed back: {job}");
    }
    let _next = env.start_worker(&[]);
    each_succeeds_once(&api, &[&held_outcome, &outlasting]).await;
}

async fn a_shutdown_hands_back_an_attempt_that_superseded_one_of_the_same_worker(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let store = env.store().await;
    let mut worker = env.start_worker(&[("SHUTDOWN_GRACE", "1s"), RUNNER_INFO]);
    let job_id = id_of(&api.submit("sleep", json!({"ms": 20000})).await);
    api.wait_status(&job_id, "RUNNING").await;

    // The same worker runs attempt 2 while attempt 1 notices it was
    // superseded and stops (at its next progress write, every 250 ms).
    force_lease_lapse(&store, &job_id).await;
    api.wait_job(&job_id, "attempt 2 running", |job| {
        job["attempts"] == 2 && job["status"] == "RUNNING"
    })
    .await;
    wait_for_stale_attempts(&worker, 1).await;

    let status = worker
        .terminate()
        .expect("the worker exits after its grace");
    assert!(status.success(), "exit status {status}");
    let job = store.get_job_unscoped(&job_id).await.unwrap().unwrap();
    assert_eq!(
        job.status,
        JobStatus::Queued,
        "attempt 2 was handed back, not left to a lapsing lease"
    );
    assert_eq!(job.error_type.as_deref(), Some("shutdown"));
}

// ---------------------------------------------------------------- queue

/// Pushes messages no job can come from onto this test's Redis queue: JSON
/// that is not `{job_id}`, and bytes that are not JSON at all.
async fn push_garbage(env: &TestEnv) {
    let queue = format!("{}:jobs", env.queue_name);
    let json_garbage = [json!({"nope": 1}), json!("text"), json!({"job_id": 7})];
    // Straight onto a tenant's FIFO and the ring of the Redis queue's
    // layout (queue/src/redis.rs).
    let client = redis::Client::open(crate::common::REDIS_URL).expect("redis");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let fifo = format!("{queue}:fifo:garbage");
    let mut raw: Vec<Vec<u8>> = json_garbage
        .iter()
        .map(|value| value.to_string().into_bytes())
        .collect();
    raw.push(b"\xffnot json{".to_vec());
    let _: () = redis::pipe()
        .rpush(&fifo, raw)
        .rpush(format!("{queue}:ring"), "garbage")
        .lpush(format!("{queue}:wake"), 1)
        .query_async(&mut conn)
        .await
        .expect("push raw");
}

/// Where anything can write to the queue (Redis: the api publishes and a
/// worker process consumes), a message no job can come from is dropped.
/// Where the job rows are the queue there are no messages to forge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_queue_message_does_not_stall_the_queue() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut worker = env.start_worker(&[]);
    // One job first, so the queue and its workers are certainly up.
    let first = id_of(&api.submit("sleep", json!({"ms": 1})).await);
    assert_eq!(api.wait_final(&first).await["status"], "SUCCEEDED");

    // The JSON garbage reaches our handler, which drops it. The bytes that
    // are not JSON: the Redis queue acknowledges them at fetch and hands the
    // handler a string it drops.
    push_garbage(&env).await;
    for _ in 0..3 {
        let job_id = id_of(&api.submit("sleep", json!({"ms": 1})).await);
        let done = api.wait_final(&job_id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 1);
    }
    assert!(
        worker.try_wait().is_none(),
        "the worker process and its pool are still up"
    );
}

async fn a_cancel_during_an_attempt_that_then_fails_retryably_ends_cancelled(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = migrated_store(&env).await;
    let job = store.submit_job(&new_sleep_job()).await.unwrap();
    let claim = store
        .claim_attempt(&job.job_id, "w", now_ms() + 60_000)
        .await
        .unwrap()
        .unwrap();
    let mut tx = store.begin_write().await.unwrap();
    store
        .cancel_job(&mut tx, "tenant-a", &job.job_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // The attempt fails retryably before it noticed the cancel.
    let retry = AttemptOutcome::RetryAt {
        at: now_ms(),
        error: JobErrorObject {
            error_type: "flaky".into(),
            message: "try again".into(),
            details: None,
        },
    };
    assert!(
        store
            .finish_attempt(&job.job_id, claim.attempt, &retry, None)
            .await
            .unwrap()
    );

    let job = store.get_job_unscoped(&job.job_id).await.unwrap().unwrap();
    assert_eq!(
        job.status,
        JobStatus::Cancelled,
        "the cancel wins over the retry"
    );
    assert!(job.finished_at.is_some());
    assert!(
        store
            .claim_attempt(&job.job_id, "w", now_ms() + 60_000)
            .await
            .unwrap()
            .is_none(),
        "no further attempt"
    );
}

/// The embedded default's queue is the job rows: jobs waiting when the api
/// process is killed run after it starts again, once each, not
/// REPUBLISH_AFTER (minutes) later; the job it was running runs again once
/// its lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_in_a_killed_embedded_api_run_after_it_restarts() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let settings = [
        ("EMBEDDED_WORKER", "true"),
        ("WORKER_CONCURRENCY", "1"),
        ("JOB_LEASE", "2s"),
        ("REPUBLISH_AFTER", "10m"),
    ];
    let mut api = env.start_api(&settings).await;
    let busy = id_of(&api.submit("sleep", json!({"ms": 2000})).await);
    api.wait_status(&busy, "RUNNING").await;
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(id_of(&api.submit("sleep", json!({"ms": 0})).await));
    }
    assert_eq!(env.count(CLAIMABLE).await, 3, "the three wait as rows");
    assert_eq!(env.count("SELECT COUNT(*) FROM outbox").await, 0);
    api.process.as_mut().expect("the api process").kill_hard();

    let api = env.start_api(&settings).await;
    for job_id in waiting {
        let done = api.wait_final(&job_id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 1);
    }
    // The busy job's lease lapses and it runs again.
    assert_eq!(api.wait_final(&busy).await["status"], "SUCCEEDED");
}

/// The jobs the job rows hold as the queue: queued, and not parked at a cap.
const CLAIMABLE: &str = "SELECT COUNT(*) FROM jobs WHERE status = 'QUEUED' AND capped IS NULL";

/// A backlog waits as its job rows, and only there: nothing in the api's
/// memory, no outbox row; it drains, each job once, when the slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_waits_as_its_job_rows_alone() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "true"), ("WORKER_CONCURRENCY", "1")])
        .await;
    let busy = id_of(&api.submit("sleep", json!({"ms": 30000})).await);
    api.wait_status(&busy, "RUNNING").await;
    // 64 at a time: the backlog is what is tested, not 1,500 connections
    // opened at once (a loaded machine answers some of those 408).
    use futures::StreamExt;
    let job_ids: Vec<String> = futures::stream::iter(0..1500)
        .map(|_| async { id_of(&api.submit("sleep", json!({"ms": 0})).await) })
        .buffer_unordered(64)
        .collect()
        .await;
    assert_eq!(
        env.count(CLAIMABLE).await,
        1500,
        "every job waits as its row"
    );
    assert_eq!(env.count("SELECT COUNT(*) FROM outbox").await, 0);

    let cancel = api
        .post(&format!("/v1/jobs/{busy}/cancel"), &json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{}", cancel.text);
    for job_id in &job_ids {
        let done = api.wait_final(job_id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
        assert_eq!(done["attempts"], 1, "{done}");
    }
    assert_eq!(env.count(CLAIMABLE).await, 0);
}

/// The pool counts and times its attempts by kind and outcome: on the
/// api's `/metrics` when it runs inside the api, and on `METRICS_ADDR` in
/// a worker process.
async fn attempts_are_counted_on_metrics_in_both_shapes(backend: Backend) {
    let counted = |text: &str| {
        assert!(
            text.contains(r#"receipt_job_attempts_total{kind="sleep",outcome="succeeded"} 1"#),
            "no counted attempt in:\n{text}"
        );
        assert!(
            text.contains(r#"receipt_job_attempt_seconds_count{kind="sleep"} 1"#),
            "no timed attempt in:\n{text}"
        );
    };
    let env = TestEnv::new(backend).await;
    {
        let embedded = env.start_embedded().await;
        let job = embedded.submit("sleep", json!({"ms": 1})).await;
        embedded.wait_final(job["job_id"].as_str().unwrap()).await;
        counted(&embedded.get("/metrics").await.text);
    }
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let worker = env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]);
    let url = metrics_url(&worker);
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let done = api.wait_final(job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "SUCCEEDED");
    let answer = reqwest::get(&url).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    counted(&answer.text().await.unwrap());
}

crate::on_both_backends!(
    attempts_are_counted_on_metrics_in_both_shapes,
    a_cancel_during_an_attempt_that_then_fails_retryably_ends_cancelled,
    cancelling_a_queued_job_cancels_it_at_once_and_it_never_runs,
    cancelling_a_running_job_stops_it_at_its_next_checkpoint,
    cancelling_a_finished_job_is_a_conflict,
    a_job_failing_twice_succeeds_on_its_third_attempt,
    a_job_that_keeps_failing_fails_after_five_attempts_with_its_last_error,
    a_job_waiting_for_its_retry_is_queued_with_next_attempt_at,
    a_job_whose_worker_is_killed_is_finished_by_another_worker,
    a_stale_attempt_cannot_overwrite_the_current_one,
    a_duplicate_delivery_claims_the_job_once,
    a_group_commit_fences_each_of_its_writes,
    a_success_is_recorded_after_a_retry_on_the_same_connection,
    a_job_whose_lease_lapses_mid_attempt_succeeds_once,
    a_terminated_worker_finishes_its_running_job_and_exits_cleanly,
    a_job_outlasting_the_shutdown_grace_is_handed_back_and_run_again,
    a_shutdown_hands_back_an_attempt_that_superseded_one_of_the_same_worker,
    a_slot_claims_its_next_job_while_the_last_outcome_is_written,
    a_stopping_worker_writes_the_outcome_it_holds_before_it_exits,
    running_jobs_and_held_outcomes_share_one_shutdown_grace,
);
