//! Retries (`docs/api.md`, Retries): a retryable failure waits its backoff
//! as QUEUED, a job out of attempts is FAILED with its last error, a
//! permanent failure is never retried, and an attempt whose lease lapsed
//! counts as one. A FAILED job's retry is a new job that runs.

use serde_json::{Value, json};
use shared::{
    ids::new_job_id,
    model::{JobStatus, Priority},
    time::now_ms,
};
use store::{NewJob, RetryOutcome};
use testkit::{Backend, TestEnv};
use worker::drive::{DueClaims, run_due_jobs};

use crate::{
    harness::{error_of, job, new_job, runner, status_and_attempts, submit, submit_due_since},
    on_both_backends,
};

on_both_backends!(
    a_job_failing_twice_succeeds_on_its_third_attempt,
    a_failed_attempt_waits_its_backoff_as_queued_until_its_next_attempt_at,
    a_job_that_keeps_failing_fails_after_five_attempts_with_its_last_error,
    a_permanent_failure_is_not_retried,
    an_attempt_whose_lease_lapsed_counts_as_an_attempt,
    a_job_whose_last_attempt_lapsed_fails_with_lease_expired,
    a_retry_of_a_failed_job_is_a_new_job_that_runs_and_links_back,
);

const MINUTE: i64 = 60_000;

async fn a_job_failing_twice_succeeds_on_its_third_attempt(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1, "fail_times": 2})).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 3);

    let done = job(&runner.store, &job_id).await;
    assert_eq!((done.status, done.attempts), (JobStatus::Succeeded, 3));
    assert_eq!(done.error_type, None, "{done:?}");
    let result = runner
        .store
        .job_result("tenant-a", &job_id)
        .await
        .unwrap()
        .expect("a result");
    assert_eq!(
        serde_json::from_str::<Value>(&result).unwrap()["attempt"],
        3,
        "the result is the third attempt's"
    );
}

async fn a_failed_attempt_waits_its_backoff_as_queued_until_its_next_attempt_at(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // A first backoff of 30 to 60 minutes (an hour with equal jitter).
    let runner = runner(&env, "1h").await;
    let job_id = submit(&runner.store, "sleep", json!({"ms": 0, "fail_times": 1})).await;

    let before = now_ms();
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);
    let after = now_ms();

    let waiting = job(&runner.store, &job_id).await;
    assert_eq!((waiting.status, waiting.attempts), (JobStatus::Queued, 1));
    assert_eq!(waiting.finished_at, None);
    assert!(
        (before + 30 * MINUTE..=after + 60 * MINUTE).contains(&waiting.run_after),
        "the next attempt is due {} ms after the attempt",
        waiting.run_after - before
    );
    // Not due before then: nothing runs now, by either queue.
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 0);
    let claimed = DueClaims::new().run_next(&runner, 10).await.expect("claim");
    assert!(claimed.is_empty(), "{claimed:?}");
    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Queued, 1)
    );
}

async fn a_job_that_keeps_failing_fails_after_five_attempts_with_its_last_error(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, "sleep", json!({"ms": 1, "fail_times": 99})).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 5);

    let failed = job(&runner.store, &job_id).await;
    assert_eq!(
        (failed.status, failed.attempts),
        (JobStatus::Failed, 5),
        "docs/api.md: 5 attempts by default"
    );
    assert!(failed.finished_at.is_some());
    let (error_type, message) = error_of(&runner.store, &job_id).await.expect("an error");
    assert_eq!(error_type, "diagnostic_failure");
    assert!(message.contains("attempt 5"), "the last error: {message}");
    assert_eq!(runner.store.count_results(&job_id).await.unwrap(), 0);
    // Settled: no sixth attempt, by either queue.
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 0);
    let claimed = DueClaims::new().run_next(&runner, 10).await.expect("claim");
    assert!(claimed.is_empty(), "{claimed:?}");
}

async fn a_permanent_failure_is_not_retried(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(
        &runner.store,
        "sleep",
        json!({"ms": 1, "fail_times": 3, "permanent": true}),
    )
    .await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Failed, 1)
    );
    let (error_type, message) = error_of(&runner.store, &job_id).await.expect("an error");
    assert_eq!(error_type, "diagnostic_failure");
    assert!(message.contains("attempt 1"), "{message}");
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 0);
    let claimed = DueClaims::new().run_next(&runner, 10).await.expect("claim");
    assert!(claimed.is_empty(), "never retried: {claimed:?}");
}

/// Attempt 1 claimed by a worker that then stops answering: its lease
/// lapses, and the sweeper queues the job again.
async fn lapse_first_attempt(store: &store::Store, job_id: &str) {
    let claim = store
        .claim_attempt(job_id, "a-dead-worker", now_ms() + MINUTE)
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(claim.attempt, 1);
    store.expire_lease_now(job_id).await.expect("lapse");
    store.requeue_lapsed_leases(100).await.expect("sweep");
}

async fn an_attempt_whose_lease_lapsed_counts_as_an_attempt(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit_due_since(
        &runner.store,
        NewJob {
            max_attempts: 2,
            ..new_job("tenant-a", "sleep", &json!({"ms": 1, "fail_times": 1}))
        },
        0,
    )
    .await;
    lapse_first_attempt(&runner.store, &job_id).await;
    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Queued, 1)
    );

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    // Attempt 2 passed `fail_times` 1: the lapsed attempt was counted.
    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Succeeded, 2)
    );
    let result = runner
        .store
        .job_result("tenant-a", &job_id)
        .await
        .unwrap()
        .expect("a result");
    assert_eq!(
        serde_json::from_str::<Value>(&result).unwrap()["attempt"],
        2
    );
}

async fn a_job_whose_last_attempt_lapsed_fails_with_lease_expired(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit_due_since(
        &runner.store,
        NewJob {
            max_attempts: 1,
            ..new_job("tenant-a", "sleep", &json!({"ms": 1}))
        },
        0,
    )
    .await;

    lapse_first_attempt(&runner.store, &job_id).await;

    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Failed, 1)
    );
    let (error_type, message) = error_of(&runner.store, &job_id).await.expect("an error");
    assert_eq!(error_type, "lease_expired", "{message}");
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 0);
}

async fn a_retry_of_a_failed_job_is_a_new_job_that_runs_and_links_back(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let params = json!({"ms": 0, "fail_times": 1, "permanent": true});
    let original = submit_due_since(
        store,
        NewJob {
            priority: Priority::Low,
            ..new_job("tenant-a", "sleep", &params)
        },
        0,
    )
    .await;
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);
    let failed = job(store, &original).await;
    assert_eq!(failed.status, JobStatus::Failed);

    let mut retries = Vec::new();
    for _ in 0..2 {
        let mut tx = store.begin_write().await.expect("begin");
        let outcome = store
            .retry_job(
                &mut tx,
                "tenant-a",
                &original,
                &new_job_id(),
                |_| {
                    Some(store::KindTerms {
                        max_attempts: 5,
                        external: false,
                    })
                },
                None,
            )
            .await
            .expect("retry");
        tx.commit().await.expect("commit");
        let RetryOutcome::Created(again) = outcome else {
            panic!("not retried: {outcome:?}");
        };
        retries.push(again.job_id);
    }
    let mut ran = DueClaims::new().run_next(&runner, 10).await.expect("claim");

    ran.sort();
    let mut expected = retries.clone();
    expected.sort();
    assert_eq!(ran, expected, "each retry is a job of its own that runs");
    for retry in &retries {
        let done = job(store, retry).await;
        // Attempt 1 of the new job: the same parameters fail the same way.
        assert_eq!((done.status, done.attempts), (JobStatus::Failed, 1));
        assert_eq!(done.retry_of.as_deref(), Some(original.as_str()));
        assert_eq!(done.kind, "sleep");
        assert_eq!(serde_json::from_str::<Value>(&done.params).unwrap(), params);
        assert_eq!(done.priority, Priority::Low, "a retry keeps the priority");
    }
    let kept = job(store, &original).await;
    assert_eq!(
        (kept.status, kept.attempts),
        (failed.status, failed.attempts)
    );
    assert_eq!(kept.retry_of, None);
}
