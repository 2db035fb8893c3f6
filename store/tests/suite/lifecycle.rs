//! A job's life at the store: submit, claim, heartbeat, the end of an
//! attempt, and the fence that keeps a stale attempt from writing.

use serde_json::json;
use shared::{
    ids::new_job_id,
    model::{AttemptOutcome, JobErrorObject, JobStatus, ResultBody},
    time::now_ms,
};
use store::{LeaseCheck, NewJob, StoredResult, SuccessWrite};

use crate::{
    harness::TestDb,
    on_both_databases,
    rows::{execute, scalar},
    webhooks::registered,
};

on_both_databases!(
    a_claimed_job_succeeds_once_with_its_result,
    a_stale_attempt_cannot_overwrite_a_finished_job,
    a_retryable_failure_queues_the_job_again_after_its_backoff,
    a_cancel_asked_while_running_wins_over_the_retry,
    a_lapsed_lease_is_requeued_then_failed_when_attempts_are_used_up,
    claims_and_successes_written_together_answer_each_write,
);

/// A quick job of `tenant`, of two attempts at most.
pub(crate) fn new_job(tenant: &str) -> NewJob {
    NewJob {
        job_id: new_job_id(),
        tenant_id: tenant.into(),
        kind: "sleep".into(),
        params: json!({"ms": 1}).to_string(),
        max_attempts: 2,
        priority: Default::default(),
        external: false,
    }
}

fn lease() -> i64 {
    now_ms() + 60_000
}

fn error(kind: &str) -> JobErrorObject {
    JobErrorObject {
        error_type: kind.into(),
        message: format!("{kind} happened"),
        details: None,
    }
}

async fn claim(db: &TestDb, job_id: &str, worker: &str) -> Option<store::Claim> {
    db.store
        .claim_attempts(&[job_id.to_owned()], worker, lease(), &Default::default())
        .await
        .unwrap()
        .pop()
        .flatten()
}

async fn a_claimed_job_succeeds_once_with_its_result(db: &TestDb) {
    let job = db.store.submit_job(&new_job("acme")).await.unwrap();
    let first = claim(db, &job.job_id, "w1")
        .await
        .expect("the first claim wins");
    assert_eq!((first.attempt, first.counted_attempt), (1, 1));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&first.params).unwrap(),
        json!({"ms": 1})
    );
    assert!(
        claim(db, &job.job_id, "w2").await.is_none(),
        "a running job is not claimed again"
    );
    let result = json!({"slept_ms": 1}).to_string();
    let applied = db
        .store
        .finish_succeeded(&[SuccessWrite::new(
            job.job_id.clone(),
            1,
            ResultBody::Document(result.clone()),
        )])
        .await
        .unwrap();
    assert_eq!(applied, [true]);
    let again = db
        .store
        .finish_succeeded(&[SuccessWrite::new(
            job.job_id.clone(),
            1,
            ResultBody::Document("{}".into()),
        )])
        .await
        .unwrap();
    assert_eq!(
        again,
        [false],
        "a second success of the same attempt is dropped"
    );
    let stored = db.store.stored_result("acme", &job.job_id).await.unwrap();
    let Some(StoredResult::Document(body)) = stored else {
        panic!("a document result, got {stored:?}");
    };
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body, json!({"slept_ms": 1}));
    let job = db
        .store
        .get_job("acme", &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(job.attempts, 1);
    assert!(job.finished_at.is_some());
    assert!(
        db.store
            .get_job("other", &job.job_id)
            .await
            .unwrap()
            .is_none(),
        "tenants see their own jobs only"
    );
}

async fn a_stale_attempt_cannot_overwrite_a_finished_job(db: &TestDb) {
    let job = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(db, &job.job_id, "w1").await.expect("claimed");
    db.store.expire_lease_now(&job.job_id).await.unwrap();
    let (requeued, failed) = db.store.requeue_lapsed_leases(10).await.unwrap();
    assert_eq!((requeued, failed.len()), (1, 0));
    let second = claim(db, &job.job_id, "w2")
        .await
        .expect("the next attempt");
    assert_eq!(second.attempt, 2);
    assert_eq!(
        db.store.heartbeat(&job.job_id, 1, lease()).await.unwrap(),
        LeaseCheck::Lost,
        "the stale attempt has lost its lease"
    );
    let stale = db
        .store
        .finish_succeeded(&[
            SuccessWrite::new(
                job.job_id.clone(),
                1,
                ResultBody::Document(json!({"by": 1}).to_string()),
            ),
            SuccessWrite::new(
                job.job_id.clone(),
                2,
                ResultBody::Document(json!({"by": 2}).to_string()),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(stale, [false, true], "only the current attempt writes");
    let Some(StoredResult::Document(body)) =
        db.store.stored_result("acme", &job.job_id).await.unwrap()
    else {
        panic!("a document result");
    };
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        json!({"by": 2})
    );
    let late = db
        .store
        .finish_attempt(
            &job.job_id,
            1,
            &AttemptOutcome::Failed {
                error: error("late"),
            },
            None,
        )
        .await
        .unwrap();
    assert!(!late, "a stale failure changes nothing");
    let job = db
        .store
        .get_job("acme", &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.status, JobStatus::Succeeded);
}

async fn a_retryable_failure_queues_the_job_again_after_its_backoff(db: &TestDb) {
    let job = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(db, &job.job_id, "w1").await.expect("claimed");
    let at = now_ms() + 60_000;
    let applied = db
        .store
        .finish_attempt(
            &job.job_id,
            1,
            &AttemptOutcome::RetryAt {
                at,
                error: error("flaky"),
            },
            None,
        )
        .await
        .unwrap();
    assert!(applied);
    let queued = db
        .store
        .get_job("acme", &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!(queued.run_after, at);
    assert_eq!(queued.error_type.as_deref(), Some("flaky"));
    assert!(
        claim(db, &job.job_id, "w1").await.is_none(),
        "not claimed before its backoff ends"
    );
    let published = db
        .store
        .take_due_outbox(10, 1_000, |_| async { true })
        .await
        .unwrap();
    assert!(
        published.iter().all(|q| q.job_id != job.job_id),
        "its outbox row is not due before the backoff ends"
    );
}

async fn a_cancel_asked_while_running_wins_over_the_retry(db: &TestDb) {
    let job = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(db, &job.job_id, "w1").await.expect("claimed");
    let mut tx = db.store.begin_write().await.unwrap();
    let outcome = db
        .store
        .cancel_job(&mut tx, "acme", &job.job_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(outcome, store::CancelOutcome::Done(ref j) if j.cancel_requested));
    assert_eq!(
        db.store.heartbeat(&job.job_id, 1, lease()).await.unwrap(),
        LeaseCheck::Held {
            cancel_requested: true
        }
    );
    db.store
        .finish_attempt(
            &job.job_id,
            1,
            &AttemptOutcome::RetryAt {
                at: now_ms(),
                error: error("flaky"),
            },
            None,
        )
        .await
        .unwrap();
    let job = db
        .store
        .get_job("acme", &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    assert!(!job.cancel_requested);
}

async fn a_lapsed_lease_is_requeued_then_failed_when_attempts_are_used_up(db: &TestDb) {
    let job = db.store.submit_job(&new_job("acme")).await.unwrap();
    for attempt in 1..=2 {
        let claimed = claim(db, &job.job_id, "w1").await.expect("claimed");
        assert_eq!(claimed.attempt, attempt);
        db.store.expire_lease_now(&job.job_id).await.unwrap();
        let (requeued, failed) = db.store.requeue_lapsed_leases(10).await.unwrap();
        if attempt == 1 {
            assert_eq!((requeued, failed.len()), (1, 0));
        } else {
            assert_eq!((requeued, failed), (0, vec![job.job_id.clone()]));
        }
    }
    let job = db
        .store
        .get_job("acme", &job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error_type.as_deref(), Some("lease_expired"));
}

fn document(job_id: &str, attempt: i64, body: &str) -> SuccessWrite {
    SuccessWrite::new(job_id, attempt, ResultBody::Document(body.into()))
}

/// What a worker's claims and successes waiting at one moment get, in one
/// statement on Postgres and one transaction on SQLite: each write its
/// own answer.
async fn claims_and_successes_written_together_answer_each_write(db: &TestDb) {
    let running = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(db, &running.job_id, "w1").await.unwrap();
    let watched = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(db, &watched.job_id, "w1").await.unwrap();
    let webhook = registered(db, "acme", &["job.succeeded"], Some(&watched.job_id)).await;
    let queued = db.store.submit_job(&new_job("acme")).await.unwrap();

    let (claimed, succeeded) = db
        .store
        .claim_and_finish_succeeded(
            &[
                queued.job_id.clone(),
                queued.job_id.clone(),
                running.job_id.clone(),
            ],
            "w2",
            lease(),
            &Default::default(),
            &[
                document(&running.job_id, 1, r#"{"n":1}"#),
                document(&watched.job_id, 1, r#"{"n":2}"#),
                document(&running.job_id, 2, r#"{"n":3}"#),
            ],
        )
        .await;

    let claimed: Vec<Option<(String, i64)>> = claimed
        .unwrap()
        .into_iter()
        .map(|claim| claim.map(|claim| (claim.job_id, claim.attempt)))
        .collect();
    assert_eq!(
        claimed,
        [Some((queued.job_id.clone(), 1)), None, None],
        "the queued job once, by its first place; a running job not at all"
    );
    let succeeded: Vec<bool> = succeeded.unwrap().into_iter().map(Result::unwrap).collect();
    assert_eq!(
        succeeded,
        [true, true, false],
        "both current attempts end, a stale one does not"
    );
    let stored = db
        .store
        .stored_result("acme", &running.job_id)
        .await
        .unwrap();
    assert!(
        matches!(&stored, Some(StoredResult::Document(body)) if body.contains("1")),
        "{stored:?}"
    );
    assert_eq!(
        scalar(
            db,
            &format!(
                "SELECT COUNT(*) FROM webhook_events WHERE webhook_id = '{}'",
                webhook.webhook_id
            )
        )
        .await,
        1,
        "the watched job's success made its event"
    );
    assert_eq!(
        scalar(db, "SELECT COUNT(*) FROM outbox").await,
        0,
        "the claim took its job's row"
    );
}

/// One success the database refuses, in the statement (Postgres) or the
/// transaction (SQLite) that also claims: the claims and the other
/// successes are written all the same.
#[tokio::test]
async fn a_write_the_database_refuses_fails_nothing_written_beside_it() {
    a_refused_write_fails_nothing_beside_it(TestDb::postgres().await, "not JSON").await;
}

#[tokio::test]
async fn a_write_sqlite_refuses_fails_nothing_written_beside_it() {
    let db = TestDb::sqlite().await;
    // SQLite stores any text as a result: a trigger of the test's refuses
    // this one.
    execute(
        &db,
        "CREATE TRIGGER refuse_a_result BEFORE INSERT ON job_results
         WHEN NEW.body = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .await;
    a_refused_write_fails_nothing_beside_it(db, "refused").await;
}

async fn a_refused_write_fails_nothing_beside_it(db: TestDb, refused: &str) {
    let good = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(&db, &good.job_id, "w1").await.unwrap();
    let bad = db.store.submit_job(&new_job("acme")).await.unwrap();
    claim(&db, &bad.job_id, "w1").await.unwrap();
    let queued = db.store.submit_job(&new_job("acme")).await.unwrap();

    let (claimed, succeeded) = db
        .store
        .claim_and_finish_succeeded(
            std::slice::from_ref(&queued.job_id),
            "w2",
            lease(),
            &Default::default(),
            &[
                document(&good.job_id, 1, "{}"),
                document(&bad.job_id, 1, refused),
            ],
        )
        .await;

    assert!(claimed.unwrap()[0].is_some(), "the claim is written");
    let succeeded = succeeded.unwrap();
    assert!(matches!(succeeded[0], Ok(true)), "{:?}", succeeded[0]);
    assert!(succeeded[1].is_err(), "{:?}", succeeded[1]);
    db.finish().await;
}
