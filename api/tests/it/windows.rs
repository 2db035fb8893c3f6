//! Crash windows between two steps, each reached every time by a failpoint
//! (`shared::failpoints`) armed in the process under test, in the
//! production shape. `REPUBLISH_AFTER` keeps its default of five minutes:
//! every job must run within seconds, because lost messages are found by
//! asking the queue, not by waiting.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Announcements, Backend, KEY_A, StoreOf, TestEnv, assert_announced_once, wait};

/// Well under `REPUBLISH_AFTER`, and what a job may wait after a fault.
const SOON: Duration = Duration::from_secs(20);

async fn post_sleep(base: &str, key: &str) -> reqwest::Result<reqwest::Response> {
    post_sleep_to(&format!("{base}/v1/reports/sleep"), key).await
}

async fn post_sleep_to(url: &str, key: &str) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(KEY_A)
        .header("Idempotency-Key", key)
        .json(&json!({ "ms": 10 }))
        .timeout(Duration::from_secs(10))
        .send()
        .await
}

/// The job a first submit for `key` made (answered 202).
async fn accepted(base: &str, key: &str) -> String {
    let response = post_sleep(base, key).await.expect("answered");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let job: Value = response.json().await.expect("a job");
    job["job_id"].as_str().expect("job_id").to_owned()
}

/// The job the stored answer for `key` names, from a retry of the submit.
async fn accepted_on_retry(base: &str, key: &str) -> String {
    let response = post_sleep(base, key).await.expect("the retry is answered");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true"),
        "the retry replays the first submit's answer"
    );
    let job: Value = response.json().await.expect("a job");
    job["job_id"].as_str().expect("job_id").to_owned()
}

async fn assert_succeeds_by(env: &TestEnv, job_id: &str, deadline: Instant) {
    let store = env.store().await;
    let job = wait::until_ok(
        &format!("{job_id} run"),
        deadline.saturating_duration_since(Instant::now()),
        async || {
            let job = store.get_job_unscoped(job_id).await.expect("read job");
            match job.as_ref().map(|j| j.status.as_str()) {
                Some("SUCCEEDED") => Ok(job),
                _ => Err(job),
            }
        },
    )
    .await;
    assert_eq!(job.as_ref().map(|j| j.attempts), Some(1), "{job:?}");
}

/// Submits for `key` to an api that dies right after its commit, before
/// it answers or publishes anything.
async fn submit_to_an_api_killed_after_its_commit(env: &TestEnv, key: &str) {
    let mut dying = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("FAILPOINTS", "api::submit_after_commit=return"),
        ])
        .await;
    assert!(
        post_sleep(&dying.base, key).await.is_err(),
        "the api dies before it answers"
    );
    dying.process.as_mut().expect("api").wait_exit();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_committed_by_an_api_killed_before_its_push_runs_within_seconds() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let _worker = env.start_worker(&[]);
    submit_to_an_api_killed_after_its_commit(&env, "killed-after-commit").await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM jobs WHERE status = 'QUEUED'")
            .await,
        1,
        "the job was committed before the api died"
    );
    assert_eq!(
        env.count("SELECT COUNT(*) FROM outbox").await,
        0,
        "a job the api pushes to Redis itself has no outbox row: the relay's \
         sweep, asking Redis, is what finds it"
    );

    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job_id = accepted_on_retry(&api.base, "killed-after-commit").await;
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
}

/// Where the job row is the queue, a job is claimable once it commits: an
/// api that dies right after the commit leaves nothing for anyone to
/// publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_committed_by_an_api_killed_after_its_commit_runs_on_the_database_queue() {
    let env = TestEnv::new(Backend::PgRedis).await.without_redis();
    submit_to_an_api_killed_after_its_commit(&env, "killed-after-commit").await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM jobs WHERE status = 'QUEUED' AND capped IS NULL")
            .await,
        1,
        "the job is claimable as it committed"
    );
    assert_eq!(env.count("SELECT COUNT(*) FROM outbox").await, 0);

    let killed = Instant::now();
    let _worker = env.start_worker(&[]);
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job_id = accepted_on_retry(&api.base, "killed-after-commit").await;
    assert_succeeds_by(&env, &job_id, killed + SOON).await;
}

/// A claim that fails on an error that is not an outage (a bug, say): on
/// Redis it hands the job to the relay, as a job with no outbox row
/// (pushed at submit) must not wait for ever; where the job row is the
/// queue, the job stays claimable and the worker claims again.
async fn a_job_whose_claim_was_refused_runs_within_seconds(env: TestEnv) {
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let worker = env.start_worker(&[("FAILPOINTS", "worker::claim_refused=1*return")]);
    let job_id = accepted(&api.base, "claim-refused").await;
    worker.wait_for_line_containing(if env.uses_redis() {
        "could not claim; the relay will publish it again"
    } else {
        "could not claim due jobs; claiming again shortly"
    });
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_whose_commit_answer_was_lost_runs_within_seconds() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let _worker = env.start_worker(&[]);
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("FAILPOINTS", "api::submit_commit_answer_lost=1*return"),
        ])
        .await;
    let first = post_sleep(&api.base, "answer-lost")
        .await
        .expect("answered");
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(first.headers().get("retry-after").is_some());

    let job_id = accepted_on_retry(&api.base, "answer-lost").await;
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
}

/// The worker's first fetch takes the waiting message into its hold (the
/// Redis consumer's in-flight list); the answer never reaches it. Its
/// heartbeat goes on, so nothing hands the message back on its behalf:
/// the consumer must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_fetch_answer_was_lost_still_runs() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job_id = accepted(&api.base, "fetch-lost").await;

    let _worker = env.start_worker(&[("FAILPOINTS", "queue::fetch_answer_lost=1*return")]);
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
}

crate::on_both_production_queues!(
    a_job_whose_claim_was_refused_runs_within_seconds,
    a_claim_whose_commit_answer_was_lost_runs_its_job_once,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_fetch_and_claim_leaves_its_job_to_another() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut dying = env.start_worker(&[("FAILPOINTS", "worker::before_claim=return")]);
    let job_id = accepted(&api.base, "worker-killed").await;
    dying.wait_exit();
    let killed = Instant::now();

    let _worker = env.start_worker(&[]);
    assert_succeeds_by(&env, &job_id, killed + SOON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_its_push_and_its_lease_leaves_nothing_waiting() {
    // The relay publishes a job delayed by a second to Redis, and dies
    // before its lease commits (where the job rows are the queue there is
    // no relay: the job is claimable from its row).
    let env = TestEnv::new(Backend::PgRedis).await;
    let mut dying = env
        .start_api(&[
            ("EMBEDDED_WORKER", "false"),
            ("FAILPOINTS", "store::outbox_published_before_lease=return"),
        ])
        .await;
    let delayed = format!("{}/v1/reports/sleep?delay=1", dying.base);
    let submitted = post_sleep_to(&delayed, "relay-killed").await;
    let process = dying.process.as_mut().expect("api");
    process.wait_exit();
    let job_id = match submitted {
        Ok(response) if response.status() == StatusCode::ACCEPTED => {
            let job: Value = response.json().await.expect("a job");
            job["job_id"].as_str().expect("job_id").to_owned()
        }
        // The relay may have died before the answer went out.
        _ => {
            let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
            let delayed = format!("{}/v1/reports/sleep?delay=1", api.base);
            let response = post_sleep_to(&delayed, "relay-killed")
                .await
                .expect("the retry is answered");
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            let job: Value = response.json().await.expect("a job");
            job["job_id"].as_str().expect("job_id").to_owned()
        }
    };
    let killed = Instant::now();
    let _worker = env.start_worker(&[]);
    assert_succeeds_by(&env, &job_id, killed + SOON).await;
}

/// A claim commits and its answer is lost: on Redis the message's
/// claim is tried again and finds the attempt held by this worker; where
/// the job row is the queue, the worker takes up the attempts it holds
/// without knowing before it claims again.
async fn a_claim_whose_commit_answer_was_lost_runs_its_job_once(env: TestEnv) {
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    // A lease well beyond SOON: the job must run by the claim that went
    // through, not by a second attempt after that claim's lease lapsed.
    let worker = env.start_worker(&[
        ("FAILPOINTS", "worker::claim_answer_lost=1*return"),
        ("JOB_LEASE", "60s"),
    ]);
    let job_id = accepted(&api.base, "claim-lost").await;
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
    if !env.uses_redis() {
        worker
            .wait_for_line_containing("took up attempts a claim won although its answer was lost");
    }
    assert_eq!(
        env.count(&format!(
            "SELECT attempts FROM jobs WHERE job_id = '{job_id}'"
        ))
        .await,
        1,
        "the claim that went through ran the job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_whose_commit_answer_was_lost_is_recorded_once() {
    let mut env = TestEnv::new(Backend::PgRedis).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let _worker = env.start_worker(&[("FAILPOINTS", "worker::outcome_answer_lost=1*return")]);
    let job_id = accepted(&api.base, "success-lost").await;
    assert_succeeds_by(&env, &job_id, Instant::now() + SOON).await;
    let result = reqwest::Client::new()
        .get(format!("{}/v1/jobs/{job_id}/result", api.base))
        .bearer_auth(KEY_A)
        .send()
        .await
        .expect("the result");
    assert_eq!(result.status(), StatusCode::OK);
    // Written again after the lost answer, and fenced: announced once.
    assert_announced_once(&announced, &api, &[&job_id], "job.succeeded").await;
}

/// Outages under one job's attempts (its progress write's answer lost, five
/// times in a row, as many as its attempts) hand each attempt back
/// uncounted: the job still succeeds, and counts one attempt.
async fn outages_under_attempts_do_not_use_them_up(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let failpoint = ("FAILPOINTS", "store::progress_answer_lost=5*return");
    let (api, _worker) = match backend {
        Backend::Sqlite => (
            env.start_api(&[("EMBEDDED_WORKER", "true"), failpoint])
                .await,
            None,
        ),
        Backend::PgRedis => (
            env.start_api(&[("EMBEDDED_WORKER", "false")]).await,
            Some(env.start_worker(&[failpoint])),
        ),
    };
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let done = api
        .wait_final(job["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_under_attempts_do_not_use_them_up_embedded() {
    outages_under_attempts_do_not_use_them_up(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_under_attempts_do_not_use_them_up_in_production() {
    outages_under_attempts_do_not_use_them_up(Backend::PgRedis).await;
}
