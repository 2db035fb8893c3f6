//! The outbox: what waits in it, and when the relay and the lost-message
//! sweep see it.

use serde_json::json;
use shared::{ids::new_job_id, time::now_ms};
use store::{NewJob, QueuedJob, Submission};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    a_delayed_job_waits_unpublished_in_the_outbox_until_its_start,
    a_job_pushed_without_a_row_is_found_by_the_sweep_and_given_one_once,
    the_sweep_pages_through_every_queued_job_once,
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

    // A restart of the in-process queue makes what it held due, not what
    // waits for its start.
    assert_eq!(db.store.make_outbox_due_now().await.unwrap(), 1);
    assert_eq!(
        publish_due(db).await,
        std::slice::from_ref(&at_once.job.job_id)
    );

    // Its start comes: then, and only then, it is due.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let due = loop {
        let due = publish_due(db).await;
        if !due.is_empty() {
            break due;
        }
        assert!(std::time::Instant::now() < deadline, "due within 5 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
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
