//! The outbox: what waits in it, and when the relay and the lost-message
//! sweep see it.

use serde_json::json;
use shared::{ids::new_job_id, time::now_ms};
use store::{NewJob, QueuedJob, Submission};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(a_delayed_job_waits_unpublished_in_the_outbox_until_its_start);

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
            Some(5_000),
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
        .published_unclaimed("", now_ms() + 1, 100)
        .await
        .unwrap()
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
