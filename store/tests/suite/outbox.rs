//! The outbox: what waits in it, and when the relay and the lost-message
//! sweep see it.

use serde_json::json;
use shared::{ids::new_job_id, time::now_ms};
use sqlx::{Connection, Executor, PgConnection};
use store::{NewJob, QueuedJob, Submission};

use crate::{
    harness::TestDb,
    on_both_databases,
    rows::{execute, scalar, wait_for_lock_waits},
};

on_both_databases!(
    a_delayed_job_waits_unpublished_in_the_outbox_until_its_start,
    a_job_pushed_without_a_row_is_found_by_the_sweep_and_given_one_once,
    the_sweep_pages_through_every_queued_job_once,
    a_claim_takes_its_jobs_rows_with_it,
    the_relay_drops_a_row_whose_job_is_no_longer_queued,
    a_message_that_came_early_is_let_go_and_its_job_published_when_due,
);

fn submission(run_after_ms: i64) -> Submission {
    let now = now_ms();
    Submission {
        run_after: now + run_after_ms,
        ..Submission::at_once(
            NewJob {
                job_id: new_job_id(),
                tenant_id: "acme".into(),
                kind: "sleep".into(),
                params: json!({"ms": 1}).to_string(),
                max_attempts: 2,
                priority: Default::default(),
                external: false,
            },
            now,
        )
    }
}

/// The ids `take_due_outbox` publishes now.
async fn publish_due(db: &TestDb) -> Vec<String> {
    db.store
        .take_due_outbox(100, 60_000, async |_| true)
        .await
        .unwrap()
        .into_iter()
        .map(|job: QueuedJob| job.job_id)
        .collect()
}

/// What `take_due_outbox` publishes once anything is due; panics when
/// nothing is within 5 s.
async fn wait_for_due(db: &TestDb) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let due = publish_due(db).await;
        if !due.is_empty() {
            return due;
        }
        assert!(std::time::Instant::now() < deadline, "due within 5 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn a_delayed_job_waits_unpublished_in_the_outbox_until_its_start(db: &TestDb) {
    let at_once = submission(0);
    let delayed = submission(60_000);
    let soon = submission(300);
    // Written as the embedded api writes what it publishes itself.
    db.store
        .submit_batch(
            &[at_once.clone(), delayed.clone(), soon.clone()],
            store::Publishing::Caller {
                republish_after_ms: 5_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        publish_due(db).await,
        Vec::<String>::new(),
        "nothing is due yet"
    );

    let published: Vec<String> = db
        .store
        .queued_unclaimed(&Default::default(), now_ms() + 1, 100)
        .await
        .unwrap()
        .0
        .into_iter()
        .map(|job| job.job_id)
        .collect();
    assert_eq!(
        published,
        std::slice::from_ref(&at_once.job.job_id),
        "a delayed job was never published, so it cannot be lost"
    );
    assert!(
        db.store
            .claim_attempts(
                std::slice::from_ref(&delayed.job.job_id),
                "w1",
                now_ms() + 60_000,
                &Default::default()
            )
            .await
            .unwrap()
            .pop()
            .flatten()
            .is_none(),
        "a message that came early claims nothing"
    );

    // Making every published row due again (a queue found to have lost
    // its messages) leaves what waits for its start alone.
    assert_eq!(db.store.make_outbox_due_now().await.unwrap(), 1);
    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&at_once.job.job_id)
    );

    // Its start comes: then, and only then, it is due.
    let due = wait_for_due(db).await;
    assert!(now_ms() >= soon.run_after, "not before its start");
    assert_eq!(due, std::slice::from_ref(&soon.job.job_id));
    let job = db
        .store
        .get_job("acme", &delayed.job.job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.run_after, delayed.run_after);
}

/// A job that runs at once, made `ago_ms` before now.
fn made_ago(ago_ms: i64) -> Submission {
    let mut submission = submission(0);
    submission.created_at -= ago_ms;
    submission.run_after = submission.created_at;
    submission
}

async fn swept(db: &TestDb, before: i64) -> Vec<String> {
    db.store
        .queued_unclaimed(&Default::default(), before, 100)
        .await
        .unwrap()
        .0
        .into_iter()
        .map(|job| job.job_id)
        .collect()
}

async fn republished(db: &TestDb, jobs: &[&Submission], before: i64) -> Vec<String> {
    let jobs: Vec<QueuedJob> = jobs.iter().map(|s| db.store.queued_job(s)).collect();
    db.store
        .republish_outbox(&jobs, before, 60_000, async |_| true)
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.job_id)
        .collect()
}

async fn a_job_pushed_without_a_row_is_found_by_the_sweep_and_given_one_once(db: &TestDb) {
    let lost = made_ago(10_000);
    let claimed = made_ago(10_000);
    let failed_push = made_ago(10_000);
    let emptied = made_ago(10_000);
    let delayed = submission(60_000);
    let all = [&lost, &claimed, &failed_push, &emptied, &delayed];
    db.store
        .submit_batch(&all.map(|s| s.clone()), store::Publishing::CallerSwept)
        .await
        .unwrap();
    db.store
        .claim_attempts(
            std::slice::from_ref(&claimed.job.job_id),
            "w1",
            now_ms() + 60_000,
            &Default::default(),
        )
        .await
        .unwrap();
    // No row: the relay has nothing to publish, and the sweep asks the
    // queue about every unclaimed job due since before its cut.
    assert_eq!(publish_due(db).await, Vec::<String>::new());
    let before = now_ms() - 5_000;
    let mut expected = vec![
        lost.job.job_id.clone(),
        failed_push.job.job_id.clone(),
        emptied.job.job_id.clone(),
    ];
    expected.sort();
    let mut found = swept(db, before).await;
    found.sort();
    assert_eq!(
        found, expected,
        "queued, due, unclaimed; not the delayed job"
    );

    // The sweep found `lost` missing from the queue: it gets a published
    // row as it is pushed again, once, and a claimed job gets none.
    assert_eq!(
        republished(db, &[&lost, &claimed], before).await,
        std::slice::from_ref(&lost.job.job_id)
    );
    assert_eq!(
        republished(db, &[&lost], before).await,
        Vec::<String>::new(),
        "a second relay that found it too sends nothing"
    );
    assert!(!swept(db, before).await.contains(&lost.job.job_id));
    assert_eq!(publish_due(db).await, Vec::<String>::new(), "published");

    // A push that failed hands the job to the relay.
    db.store
        .retry_outbox_soon(std::slice::from_ref(&failed_push.job.job_id), now_ms())
        .await
        .unwrap();
    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&failed_push.job.job_id)
    );

    // The queue came back empty: every unclaimed job is due again, with a
    // row or without; the delayed job keeps its start.
    assert_eq!(db.store.make_outbox_due_now().await.unwrap(), 3);
    let mut due = publish_due(db).await;
    due.sort();
    assert_eq!(due, expected);
}

async fn the_sweep_pages_through_every_queued_job_once(db: &TestDb) {
    let jobs: Vec<Submission> = (0..5).map(|i| made_ago(10_000 + i)).collect();
    db.store
        .submit_batch(&jobs, store::Publishing::CallerSwept)
        .await
        .unwrap();
    let before = now_ms() - 5_000;
    let mut cursor = store::SweepCursor::default();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (page, next) = db.store.queued_unclaimed(&cursor, before, 2).await.unwrap();
        pages += 1;
        seen.extend(page.into_iter().map(|job| job.job_id));
        match next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    let mut expected: Vec<String> = jobs.iter().map(|s| s.job.job_id.clone()).collect();
    expected.sort();
    assert_eq!(seen, expected);
}

async fn outbox_rows(db: &TestDb) -> i64 {
    scalar(db, "SELECT COUNT(*) FROM outbox").await
}

async fn a_claim_takes_its_jobs_rows_with_it(db: &TestDb) {
    let published = submission(0);
    let delayed = submission(60_000);
    db.store
        .submit_batch(
            &[published.clone(), delayed.clone()],
            store::Publishing::Relay,
        )
        .await
        .unwrap();
    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&published.job.job_id)
    );

    let lease_until = now_ms() + 60_000;
    let claims = db
        .store
        .claim_attempts(
            &[published.job.job_id.clone(), delayed.job.job_id.clone()],
            "w1",
            lease_until,
            &Default::default(),
        )
        .await
        .unwrap();

    assert!(claims[0].is_some(), "the published job is claimed");
    assert!(claims[1].is_none(), "a job not yet due is not");
    assert_eq!(
        outbox_rows(db).await,
        1,
        "the claimed job's row is gone, the delayed job's stays"
    );
}

async fn the_relay_drops_a_row_whose_job_is_no_longer_queued(db: &TestDb) {
    let running = submission(0);
    let queued = submission(0);
    db.store
        .submit_batch(
            &[running.clone(), queued.clone()],
            store::Publishing::CallerSwept,
        )
        .await
        .unwrap();
    let claim = db
        .store
        .claim_attempt(&running.job.job_id, "w1", now_ms() + 60_000)
        .await
        .unwrap();
    assert!(claim.is_some());
    // Rows due now for both, past the store (no store method writes a row
    // for a running job).
    crate::rows::execute(
        db,
        &format!(
            "INSERT INTO outbox (job_id, publish_at, rank_at)
             SELECT job_id, created_at, created_at FROM jobs
             WHERE job_id IN ('{}', '{}')",
            running.job.job_id, queued.job.job_id
        ),
    )
    .await;

    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&queued.job.job_id),
        "only the queued job is published"
    );
    assert_eq!(
        outbox_rows(db).await,
        1,
        "the running job's row is gone, the queued job's leased"
    );
}

/// A queued job handed a row while its claim waits for the job's row (as
/// the relay does for a job whose message looks lost): the claim's
/// statement began before the outbox row existed, so it cannot delete it.
/// The relay must drop that row when it comes due, not publish a running
/// job again and again.
#[tokio::test]
async fn a_row_written_while_its_claim_waited_is_dropped_not_published() {
    let db = TestDb::postgres().await;
    let job = submission(0);
    db.store
        .submit_batch(std::slice::from_ref(&job), store::Publishing::CallerSwept)
        .await
        .unwrap();
    assert_eq!(outbox_rows(&db).await, 0, "pushed at submit: no row");
    let mut relay = PgConnection::connect(db.store.url()).await.unwrap();
    relay.execute("BEGIN").await.unwrap();
    for statement in [
        "SELECT 1 FROM jobs WHERE job_id = $1 AND status = 'QUEUED' FOR SHARE",
        "INSERT INTO outbox (job_id, publish_at, rank_at)
         SELECT job_id, created_at, created_at FROM jobs WHERE job_id = $1",
    ] {
        sqlx::query(statement)
            .bind(&job.job.job_id)
            .execute(&mut relay)
            .await
            .unwrap();
    }
    let store = db.store.clone();
    let job_id = job.job.job_id.clone();
    let claiming =
        tokio::spawn(async move { store.claim_attempt(&job_id, "w1", now_ms() + 60_000).await });
    wait_for_lock_waits(&db, 1).await;
    relay.execute("COMMIT").await.unwrap();

    let claim = claiming.await.unwrap().unwrap();

    assert_eq!(claim.map(|claim| claim.attempt), Some(1));
    assert_eq!(
        publish_due(&db).await,
        Vec::<String>::new(),
        "a running job is not published"
    );
    assert_eq!(outbox_rows(&db).await, 0, "its row is gone");
    db.finish().await;
}

/// A message can reach a worker before its job is due (published by a
/// process whose clock was off, or a job made due later while its message
/// waited): the claim takes nothing, and the job must not be lost with the
/// message. `publish_when_due` gives it a row due at its start; a job
/// running or finished gets none. A job the claim found not due that is
/// due by now (the claim's clock read a moment before the one that made
/// it) gets a row due at once.
async fn a_message_that_came_early_is_let_go_and_its_job_published_when_due(db: &TestDb) {
    // Far enough ahead that the steps before its start take less on a
    // busy machine.
    let early = submission(2_000);
    let running = submission(0);
    let due_since = submission(0);
    db.store
        .submit_batch(
            &[early.clone(), running.clone(), due_since.clone()],
            store::Publishing::Relay,
        )
        .await
        .unwrap();
    // As a job made with its message has: no row.
    execute(db, "DELETE FROM outbox").await;
    let ids = [early.job.job_id.clone(), running.job.job_id.clone()];
    let claimed = db
        .store
        .claim_attempts(&ids, "w1", now_ms() + 60_000, &Default::default())
        .await
        .unwrap();
    assert!(claimed[0].is_none(), "not due: nothing to claim");
    assert!(claimed[1].is_some());

    let early_ones = [ids[0].clone(), ids[1].clone(), due_since.job.job_id.clone()];
    assert_eq!(db.store.publish_when_due(&early_ones).await.unwrap(), 2);
    assert_eq!(outbox_rows(db).await, 2, "a row for the queued jobs only");
    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&due_since.job.job_id),
        "the one due at once, the early one not before its start"
    );
    // Asked again (a second early delivery), it keeps its one row.
    assert_eq!(db.store.publish_when_due(&ids).await.unwrap(), 1);
    assert_eq!(outbox_rows(db).await, 2);

    let due = wait_for_due(db).await;
    assert_eq!(due, std::slice::from_ref(&early.job.job_id));
    assert!(now_ms() >= early.run_after, "published at its start");
}
