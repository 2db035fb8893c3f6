//! Where the job rows are the queue: jobs that come due later (delayed,
//! retried, handed back, requeued after a lapsed lease, woken at a cap)
//! need no outbox row, and an idle worker on Postgres wakes when one
//! comes due, without waiting for its next look.

use std::time::Duration;

use shared::{
    model::{AttemptOutcome, JobErrorObject},
    settings::Caps,
    time::now_ms,
};
use store::{Claim, Dialect, Publishing, Submission};
use tokio::sync::Notify;

use crate::{harness::TestDb, lifecycle::new_job, on_both_databases};

on_both_databases!(
    jobs_that_come_due_later_get_an_outbox_row_only_where_redis_is_the_queue,
    claims_and_successes_commit_apart_on_postgres_where_the_job_rows_are_the_queue,
);

/// Far past any wait of these tests: a wait that ends in time was woken.
const LONG_IDLE_LOOK: Duration = Duration::from_secs(600);
const WAKE_DEADLINE: Duration = Duration::from_secs(20);

fn the_job_rows() -> Publishing {
    Publishing::WithTheJob {
        queue: "test:jobs".into(),
    }
}

fn no_caps() -> Caps {
    Caps {
        per_tenant: 0,
        per_kind: Vec::new(),
    }
}

fn error() -> JobErrorObject {
    JobErrorObject {
        error_type: "test".into(),
        message: "ends the attempt".into(),
        details: None,
    }
}

/// Submits a job of a registered kind, due at once; returns its id.
async fn submit_external(db: &TestDb, tenant: &str) -> String {
    let submission = Submission::at_once(
        store::NewJob {
            external: true,
            ..new_job(tenant)
        },
        now_ms(),
    );
    db.store
        .submit_batch(std::slice::from_ref(&submission), the_job_rows())
        .await
        .unwrap();
    submission.job.job_id
}

/// Submits a job due at `run_after`; returns its id.
async fn submit(db: &TestDb, tenant: &str, run_after: i64) -> String {
    let submission = Submission {
        run_after,
        ..Submission::at_once(new_job(tenant), now_ms())
    };
    db.store
        .submit_batch(std::slice::from_ref(&submission), the_job_rows())
        .await
        .unwrap();
    submission.job.job_id
}

/// Claims `job_id` under `caps`.
async fn claim(db: &TestDb, job_id: &str, caps: &Caps) -> Option<Claim> {
    db.store
        .claim_attempts(&[job_id.to_owned()], "w1", now_ms() + 60_000, caps)
        .await
        .unwrap()
        .pop()
        .flatten()
}

async fn outbox_rows(db: &TestDb) -> i64 {
    db.count_past_the_store("SELECT COUNT(*) FROM outbox").await
}

/// Makes one job of each kind that comes due later, each of a tenant of
/// its own: delayed, retried after a backoff, handed back, requeued after
/// its lease lapsed, and woken at its tenant's cap. Returns the ids of
/// those due now (handed back, requeued, woken).
async fn make_jobs_that_come_due_later(db: &TestDb) -> Vec<String> {
    let later = now_ms() + 60_000;
    submit(db, "delayed", later).await;

    let retried = submit(db, "retried", now_ms()).await;
    let attempt = claim(db, &retried, &no_caps()).await.expect("claimed");
    let retry = AttemptOutcome::RetryAt {
        at: later,
        error: error(),
    };
    assert!(
        db.store
            .finish_attempt(&retried, attempt.attempt, &retry, None)
            .await
            .unwrap()
    );

    let handed_back = submit(db, "handed-back", now_ms()).await;
    let attempt = claim(db, &handed_back, &no_caps()).await.expect("claimed");
    let released = db
        .store
        .release_attempts(&[(handed_back.clone(), attempt.attempt)])
        .await
        .unwrap();
    assert_eq!(released, 1);

    let lapsed = submit(db, "lapsed", now_ms()).await;
    claim(db, &lapsed, &no_caps()).await.expect("claimed");
    db.store.expire_lease_now(&lapsed).await.unwrap();
    assert_eq!(db.store.requeue_lapsed_leases(10).await.unwrap().0, 1);

    let capped = Caps {
        per_tenant: 1,
        per_kind: Vec::new(),
    };
    let running = submit(db, "capped", now_ms()).await;
    let parked = submit(db, "capped", now_ms()).await;
    let attempt = claim(db, &running, &capped).await.expect("claimed");
    assert!(claim(db, &parked, &capped).await.is_none(), "parked");
    let failed = AttemptOutcome::Failed { error: error() };
    assert!(
        db.store
            .finish_attempt(&running, attempt.attempt, &failed, None)
            .await
            .unwrap()
    );
    vec![handed_back, lapsed, parked]
}

async fn jobs_that_come_due_later_get_an_outbox_row_only_where_redis_is_the_queue(db: &TestDb) {
    db.store.record_queue(false).await.unwrap();
    make_jobs_that_come_due_later(db).await;
    assert_eq!(
        outbox_rows(db).await,
        5,
        "with Redis, each job that comes due later waits in the outbox"
    );

    db.store.record_queue(true).await.unwrap();
    assert_eq!(outbox_rows(db).await, 0, "the rows left are deleted");
    let due_now = make_jobs_that_come_due_later(db).await;
    assert_eq!(outbox_rows(db).await, 0, "the job rows are the queue");

    // Those due are claimable from their rows (with the first round's).
    let claimed: Vec<String> = db
        .store
        .claim_due("w2", 100, "", now_ms() + 60_000, &no_caps())
        .await
        .unwrap()
        .into_iter()
        .map(|claim| claim.job_id)
        .collect();
    for job_id in &due_now {
        assert!(claimed.contains(job_id), "{job_id} is claimable");
    }
    assert_eq!(claimed.len(), 6, "both rounds' jobs due now, no other");
}

async fn claims_and_successes_commit_apart_on_postgres_where_the_job_rows_are_the_queue(
    db: &TestDb,
) {
    db.store.record_queue(false).await.unwrap();
    assert!(
        db.store.claims_commit_with_successes(&no_caps()),
        "with Redis, claims and successes share their group commits"
    );

    db.store.record_queue(true).await.unwrap();
    assert_eq!(
        db.store.claims_commit_with_successes(&no_caps()),
        db.store.dialect() == Dialect::Sqlite,
        "where the job rows are the queue, only SQLite's one writer keeps them together"
    );
}

/// Waits as an idle worker on Postgres does; panics unless woken in time.
async fn wait_for_a_wake(waiter: &mut store::DueJobWaiter) {
    let woken = Notify::new();
    tokio::time::timeout(WAKE_DEADLINE, waiter.wait(&woken))
        .await
        .expect("woken before the next look");
}

async fn claim_due(db: &TestDb) -> Vec<String> {
    db.store
        .claim_due("w1", 10, "", now_ms() + 60_000, &no_caps())
        .await
        .unwrap()
        .into_iter()
        .map(|claim| claim.job_id)
        .collect()
}

#[tokio::test]
async fn an_idle_worker_on_postgres_wakes_when_a_job_comes_due_not_at_its_next_look() {
    let db = TestDb::postgres().await;
    db.store.record_queue(true).await.unwrap();
    let mut waiter = db.store.due_job_waiter().with_idle_look(LONG_IDLE_LOOK);

    // Delayed before the wait: its due time is read when the wait begins.
    let delayed = submit(&db, "acme", now_ms() + 300).await;
    wait_for_a_wake(&mut waiter).await;
    assert_eq!(
        claim_due(&db).await,
        std::slice::from_ref(&delayed),
        "due when woken"
    );

    // A retry made while the worker waits: its NOTIFY sets the timer.
    let retry = AttemptOutcome::RetryAt {
        at: now_ms() + 300,
        error: error(),
    };
    let (_, applied) = tokio::join!(wait_for_a_wake(&mut waiter), async {
        db.store.finish_attempt(&delayed, 1, &retry, None).await
    });
    assert!(applied.unwrap());
    assert_eq!(
        claim_due(&db).await,
        std::slice::from_ref(&delayed),
        "due when woken"
    );

    // A job woken at its cap by another's end is due at once.
    let capped = Caps {
        per_tenant: 1,
        per_kind: Vec::new(),
    };
    let parked = submit(&db, "acme", now_ms()).await;
    // Its submit's wake, to be done with it.
    wait_for_a_wake(&mut waiter).await;
    assert!(claim(&db, &parked, &capped).await.is_none(), "parked");
    let failed = AttemptOutcome::Failed { error: error() };
    let (_, ended) = tokio::join!(wait_for_a_wake(&mut waiter), async {
        db.store.finish_attempt(&delayed, 2, &failed, None).await
    });
    assert!(ended.unwrap());
    assert_eq!(claim_due(&db).await, [parked], "woken by the end");
    drop(waiter);
    db.finish().await;
}

#[tokio::test]
async fn an_external_submit_wakes_the_waiting_leases_and_not_the_idle_workers_on_postgres() {
    let db = TestDb::postgres().await;
    db.store.record_queue(true).await.unwrap();
    let mut worker = db.store.due_job_waiter().with_idle_look(LONG_IDLE_LOOK);
    let mut leases = db.store.lease_waiter().with_idle_look(LONG_IDLE_LOOK);

    // Both listening, from a wake each at a delayed job's time.
    let delayed = submit(&db, "acme", now_ms() + 300).await;
    tokio::join!(wait_for_a_wake(&mut worker), wait_for_a_wake(&mut leases));
    assert_eq!(claim_due(&db).await, [delayed], "due when woken");

    tokio::join!(wait_for_a_wake(&mut leases), submit_external(&db, "acme"));

    // An external job, then a built-in one due later: the idle worker
    // wakes when the second comes due, not at the first's submit.
    let (_, later) = tokio::join!(wait_for_a_wake(&mut worker), async {
        submit_external(&db, "acme").await;
        submit(&db, "acme", now_ms() + 300).await
    });
    assert_eq!(
        claim_due(&db).await,
        [later],
        "woken by the built-in job come due, not by the external submit"
    );
    drop((worker, leases));
    db.finish().await;
}
