//! The driving itself (`worker::drive::run_due_jobs`): every due job runs
//! in the call, a retry due at once too, and nothing else.

use serde_json::json;
use shared::model::JobStatus;
use testkit::{Backend, TestEnv};
use worker::{Runner, drive::run_due_jobs};

use crate::{
    harness::{runner, status_and_attempts, submit},
    on_both_backends,
};

on_both_backends!(
    every_due_job_runs_now_and_the_call_returns_once_none_is_left,
    a_retry_due_at_once_runs_in_the_same_call,
    a_retry_due_later_is_left_for_a_later_call,
    a_permanent_failure_leaves_nothing_due,
    a_job_cancelled_while_queued_never_runs,
    a_delivery_of_a_finished_job_runs_nothing,
);

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
        job_ids.push(submit(&runner.store, "sleep", json!({"ms": 1})).await);
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
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1, "fail_times": 2})).await;

    // Three attempts, each due at once.
    assert_run(&runner, 3, &job_id, (JobStatus::Succeeded, 3)).await;
}

async fn a_retry_due_later_is_left_for_a_later_call(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "1h").await;
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1, "fail_times": 1})).await;

    // Waiting for its retry, an hour away.
    assert_run(&runner, 1, &job_id, (JobStatus::Queued, 1)).await;
    assert_run(&runner, 0, &job_id, (JobStatus::Queued, 1)).await;
}

async fn a_permanent_failure_leaves_nothing_due(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(
        &runner.store,
        "sleep",
        json!({"ms": 1, "fail_times": 1, "permanent": true}),
    )
    .await;

    assert_run(&runner, 1, &job_id, (JobStatus::Failed, 1)).await;
    assert_run(&runner, 0, &job_id, (JobStatus::Failed, 1)).await;
}

async fn a_job_cancelled_while_queued_never_runs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1})).await;
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
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1})).await;
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
