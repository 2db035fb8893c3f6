//! The operator's gauges: one sample counts the queue by kind and tenant,
//! ages the oldest due job, and measures the outbox's unpublished backlog.

use serde_json::json;
use shared::{ids::new_job_id, time::now_ms};
use store::{Dialect, KindSample, NewJob, Submission, TenantSample};

use crate::{harness::TestDb, on_both_databases, rows::execute};

on_both_databases!(a_sample_counts_the_queue_and_ages_what_waits_past_its_time);

/// A `sleep` job of `tenant_id` due `due_in_ms` from now (negative: due
/// that long ago).
fn submission(tenant_id: &str, due_in_ms: i64) -> Submission {
    let now = now_ms();
    Submission {
        run_after: now + due_in_ms,
        ..Submission::at_once(
            NewJob {
                job_id: new_job_id(),
                tenant_id: tenant_id.into(),
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

fn kind<'a>(sample: &'a store::QueueSample, name: &str) -> &'a KindSample {
    sample
        .by_kind
        .iter()
        .find(|k| k.kind == name)
        .unwrap_or_else(|| panic!("{name} in {sample:?}"))
}

async fn a_sample_counts_the_queue_and_ages_what_waits_past_its_time(db: &TestDb) {
    // Arrange: acme has two jobs due 30 s and 10 s ago and one an hour
    // ahead; globex has one due now, which a worker claims. None is
    // published yet.
    let late = submission("acme", -30_000);
    let less_late = submission("acme", -10_000);
    let delayed = submission("acme", 3_600_000);
    let running = submission("globex", 0);
    db.store
        .submit_batch(
            &[
                late.clone(),
                less_late.clone(),
                delayed.clone(),
                running.clone(),
            ],
            store::Publishing::Relay,
        )
        .await
        .unwrap();
    let claimed = db
        .store
        .claim_attempts(
            std::slice::from_ref(&running.job.job_id),
            "w1",
            now_ms() + 60_000,
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(matches!(claimed.as_slice(), [Some(_)]), "globex's job runs");
    // A row waits in the outbox from when it was written (or, delayed,
    // from its time): these were written 30 s ago.
    execute(
        db,
        match db.store.dialect() {
            Dialect::Postgres => {
                "UPDATE outbox SET publish_at = publish_at - interval '30 seconds'"
            }
            Dialect::Sqlite => "UPDATE outbox SET publish_at = publish_at - 30000",
        },
    )
    .await;

    // Act
    let sample = db
        .store
        .sample_queue(&["sleep", "gst-summary"], 1)
        .await
        .unwrap();

    // Assert: counts by kind, the delayed job among the queued ...
    let sleep = kind(&sample, "sleep");
    assert_eq!((sleep.queued, sleep.running), (3, 1), "{sample:?}");
    // ... the oldest due job's wait, not the delayed one's ...
    assert!(
        (29.0..60.0).contains(&sleep.oldest_queued_seconds),
        "{sample:?}"
    );
    // ... a kind without jobs at 0 ...
    let idle = kind(&sample, "gst-summary");
    assert_eq!(
        (idle.queued, idle.running, idle.oldest_queued_seconds),
        (0, 0, 0.0)
    );
    // ... the busiest tenant only ...
    assert_eq!(
        sample.busiest_tenants,
        vec![TenantSample {
            tenant_id: "acme".into(),
            queued: 3,
            running: 0
        }]
    );
    // ... and the due rows the relay has not published.
    assert_eq!(sample.outbox_backlog, 2, "{sample:?}");
    assert!(
        (29.0..60.0).contains(&sample.outbox_oldest_seconds),
        "{sample:?}"
    );

    // Act: the relay publishes what is due.
    db.store
        .take_due_outbox(100, 60_000, async |_| true)
        .await
        .unwrap();
    let after = db.store.sample_queue(&["sleep"], 0).await.unwrap();

    // Assert: the outbox is empty of due rows; the jobs still wait.
    assert_eq!(
        (after.outbox_backlog, after.outbox_oldest_seconds),
        (0, 0.0)
    );
    assert_eq!(kind(&after, "sleep").queued, 3);
    assert!(after.busiest_tenants.is_empty(), "none asked for");
}
