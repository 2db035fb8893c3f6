//! The worker driven in-process (`worker::drive::run_due_jobs`): every due
//! job run now, in the test's own task, so a test asserts on what running
//! them did, with no pool to start and nothing to wait for. On the
//! embedded SQLite default and on Postgres, a database per test.

use clap::Parser;
use serde_json::{Value, json};
use shared::{ids::new_job_id, model::JobStatus, notify::Signals, settings::Settings};
use store::{NewJob, Store};
use testkit::{Backend, TestEnv};
use worker::{Runner, drive::run_due_jobs};

#[derive(Parser)]
struct SettingsOnly {
    #[command(flatten)]
    settings: Settings,
}

/// The store of a fresh database, and a runner on it whose retries wait
/// `retry_delay` (the diagnostic kinds registered).
async fn runner(env: &TestEnv, retry_delay: &str) -> Runner {
    let settings = SettingsOnly::parse_from([
        "test",
        "--database-url",
        &env.database_url,
        "--enable-diagnostic-kinds",
        "--retry-base-delay",
        retry_delay,
        "--retry-max-delay",
        retry_delay,
    ])
    .settings;
    let store = Store::connect(&env.database_url).await.expect("store");
    store.migrate().await.expect("migrate");
    Runner::new(store, Signals::default(), &settings, "test-worker".into())
}

async fn submit(store: &Store, params: Value) -> String {
    let job = NewJob {
        job_id: new_job_id(),
        tenant_id: "tenant-a".into(),
        kind: "sleep".into(),
        params: params.to_string(),
        max_attempts: 5,
        priority: Default::default(),
    };
    store.submit_job(&job).await.expect("submit").job_id
}

async fn status_and_attempts(store: &Store, job_id: &str) -> (JobStatus, i64) {
    let job = store
        .get_job_unscoped(job_id)
        .await
        .expect("read")
        .expect("the job");
    (job.status, job.attempts)
}

/// Runs every due job, asserting how many deliveries that handled, then
/// the job's status and attempts.
async fn assert_run(runner: &Runner, deliveries: usize, job_id: &str, expected: (JobStatus, i64)) {
    let handled = run_due_jobs(runner).await.expect("run");
    assert_eq!(handled, deliveries, "deliveries handled");
    assert_eq!(
        status_and_attempts(&runner.store, job_id).await,
        expected,
        "{job_id}"
    );
}

async fn every_due_job_runs_now_and_the_call_returns_once_none_is_left(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let mut job_ids = Vec::new();
    for _ in 0..3 {
        job_ids.push(submit(&runner.store, json!({"ms": 1})).await);
    }

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 3);
    for job_id in &job_ids {
        assert_eq!(
            status_and_attempts(&runner.store, job_id).await,
            (JobStatus::Succeeded, 1)
        );
    }
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 0, "none left");
}

async fn a_retry_due_at_once_runs_in_the_same_call(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, json!({"ms": 1, "fail_times": 2})).await;

    // Three attempts, each due at once.
    assert_run(&runner, 3, &job_id, (JobStatus::Succeeded, 3)).await;
}

async fn a_retry_due_later_is_left_for_a_later_call(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "1h").await;
    let job_id = submit(&runner.store, json!({"ms": 1, "fail_times": 1})).await;

    // Waiting for its retry, an hour away.
    assert_run(&runner, 1, &job_id, (JobStatus::Queued, 1)).await;
    assert_run(&runner, 0, &job_id, (JobStatus::Queued, 1)).await;
}

async fn a_permanent_failure_leaves_nothing_due(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(
        &runner.store,
        json!({"ms": 1, "fail_times": 1, "permanent": true}),
    )
    .await;

    assert_run(&runner, 1, &job_id, (JobStatus::Failed, 1)).await;
    assert_run(&runner, 0, &job_id, (JobStatus::Failed, 1)).await;
}

async fn a_job_cancelled_while_queued_never_runs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, json!({"ms": 1})).await;
    let mut tx = runner.store.begin_write().await.expect("begin");
    runner
        .store
        .cancel_job(&mut tx, "tenant-a", &job_id)
        .await
        .expect("cancel");
    tx.commit().await.expect("commit");

    assert_run(&runner, 0, &job_id, (JobStatus::Cancelled, 0)).await;
}

async fn a_delivery_of_a_finished_job_runs_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, json!({"ms": 1})).await;
    assert_run(&runner, 1, &job_id, (JobStatus::Succeeded, 1)).await;

    // The queue delivers it again, as after a lost acknowledgement.
    runner
        .handle(json!({"job_id": job_id, "tenant_id": "tenant-a"}))
        .await;
    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Succeeded, 1),
        "claimed once"
    );
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(testkit::Backend::Sqlite).await;
                }
            )*
        }
        mod pg_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(testkit::Backend::PgRedis).await;
                }
            )*
        }
    };
}

on_both_backends!(
    every_due_job_runs_now_and_the_call_returns_once_none_is_left,
    a_retry_due_at_once_runs_in_the_same_call,
    a_retry_due_later_is_left_for_a_later_call,
    a_permanent_failure_leaves_nothing_due,
    a_job_cancelled_while_queued_never_runs,
    a_delivery_of_a_finished_job_runs_nothing,
);
