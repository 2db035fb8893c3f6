//! Retention: final jobs past the retention go, with their results,
//! webhook events, delivery log and per-job webhooks; nothing else does.

use shared::time::now_ms;
use store::Dialect;

use crate::{
    dashboard::assert_counters_exact,
    harness::TestDb,
    on_both_databases,
    rows::{TestJob, execute, insert_job, scalar, set_status, strings},
    webhooks::{announce, record, registered},
};

on_both_databases!(
    pruning_deletes_old_final_jobs_with_what_hangs_off_them_and_nothing_else,
    pruning_takes_the_oldest_first_up_to_the_limit,
);

const HOUR_MS: i64 = 3_600_000;

async fn job_ids(db: &TestDb) -> Vec<String> {
    strings(db, "SELECT job_id FROM jobs ORDER BY job_id").await
}

async fn pruning_deletes_old_final_jobs_with_what_hangs_off_them_and_nothing_else(db: &TestDb) {
    let now = now_ms();
    let old_done = TestJob::queued("acme").finished("SUCCEEDED", now - 2 * HOUR_MS);
    let old_failed = TestJob::queued("acme").finished("FAILED", now - HOUR_MS - 60_000);
    let recent = TestJob::queued("acme").finished("SUCCEEDED", now - 60_000);
    let old_queued = TestJob {
        created_at: now - 3 * HOUR_MS,
        ..TestJob::queued("acme")
    };
    let old_running = TestJob {
        created_at: now - 3 * HOUR_MS,
        ..TestJob::queued("other")
    };
    for job in [&old_done, &old_failed, &recent, &old_queued, &old_running] {
        insert_job(db, job).await;
    }
    set_status(db, &old_running.job_id, "RUNNING", None).await;

    let tenant_wide = registered(db, "acme", &["job.succeeded", "job.failed"], None).await;
    // Each hears of its finished job at once.
    let for_old = registered(db, "acme", &["job.succeeded"], Some(&old_done.job_id)).await;
    let for_recent = registered(db, "acme", &["job.succeeded"], Some(&recent.job_id)).await;
    announce(db, &[&old_done.job_id, &old_failed.job_id, &recent.job_id]).await;
    let events = db
        .store
        .claim_due_events(100, now_ms() + 60_000)
        .await
        .unwrap();
    assert_eq!(events.len(), 7);
    for event in &events {
        db.store
            .record_delivery(event, &record(200, None))
            .await
            .unwrap();
    }
    for job in [&old_done, &recent] {
        execute(
            db,
            &format!(
                "INSERT INTO job_results (job_id, body) VALUES ('{}', '{{}}')",
                job.job_id
            ),
        )
        .await;
    }

    let pruned = db
        .store
        .prune_finished_jobs(now - HOUR_MS, 100)
        .await
        .unwrap();
    assert_eq!(pruned.jobs, 2);
    let mut kept = vec![
        recent.job_id.clone(),
        old_queued.job_id.clone(),
        old_running.job_id.clone(),
    ];
    kept.sort();
    assert_eq!(job_ids(db).await, kept);

    // The recent job's events and log stay: one of the tenant's webhook,
    // two of its own (at registration, and at its final status).
    let events_of =
        |job_id: &str| format!("SELECT COUNT(*) FROM webhook_events WHERE job_id = '{job_id}'");
    assert_eq!(scalar(db, &events_of(&old_done.job_id)).await, 0);
    assert_eq!(scalar(db, &events_of(&old_failed.job_id)).await, 0);
    assert_eq!(scalar(db, &events_of(&recent.job_id)).await, 3);
    assert_eq!(scalar(db, "SELECT COUNT(*) FROM webhook_events").await, 3);
    let kept_log = "SELECT COUNT(*) FROM webhook_deliveries d
                    WHERE EXISTS (SELECT 1 FROM webhook_events e WHERE e.event_id = d.event_id)";
    assert_eq!(
        scalar(db, "SELECT COUNT(*) FROM webhook_deliveries").await,
        3
    );
    assert_eq!(scalar(db, kept_log).await, 3);

    let mut webhooks = vec![
        tenant_wide.webhook_id.clone(),
        for_recent.webhook_id.clone(),
    ];
    webhooks.sort();
    let left = strings(db, "SELECT webhook_id FROM webhooks ORDER BY webhook_id").await;
    assert_eq!(left, webhooks);
    assert!(!left.contains(&for_old.webhook_id));
    let results = strings(db, "SELECT job_id FROM job_results").await;
    assert_eq!(results, [recent.job_id.as_str()]);
    assert_counters_exact(db, "acme", "after pruning").await;
    db.store.fold_job_counts().await.unwrap();
    assert_counters_exact(db, "acme", "after pruning and a fold").await;

    let again = db
        .store
        .prune_finished_jobs(now - HOUR_MS, 100)
        .await
        .unwrap();
    assert_eq!(again.jobs, 0);
    assert_eq!(job_ids(db).await, kept);
}

async fn pruning_takes_the_oldest_first_up_to_the_limit(db: &TestDb) {
    let expected_batch = match db.store.dialect() {
        Dialect::Postgres => 250,
        Dialect::Sqlite => 1_000,
    };
    assert_eq!(db.store.max_prune_batch(), expected_batch);
    let now = now_ms();
    // Made in another order than they finished in: the oldest ids are not
    // the oldest finished.
    let jobs: Vec<TestJob> = [3, 5, 4]
        .into_iter()
        .map(|hours| TestJob::queued("acme").finished("CANCELLED", now - hours * HOUR_MS))
        .collect();
    let recent = TestJob::queued("acme").finished("SUCCEEDED", now);
    for job in jobs.iter().chain([&recent]) {
        insert_job(db, job).await;
    }
    let first = db
        .store
        .prune_finished_jobs(now - HOUR_MS, 2)
        .await
        .unwrap();
    assert_eq!(first.jobs, 2);
    let mut left = vec![jobs[0].job_id.clone(), recent.job_id.clone()];
    left.sort();
    assert_eq!(job_ids(db).await, left);
    let second = db
        .store
        .prune_finished_jobs(now - HOUR_MS, 2)
        .await
        .unwrap();
    assert_eq!(second.jobs, 1);
    assert_eq!(job_ids(db).await, [recent.job_id.as_str()]);
    let none = db
        .store
        .prune_finished_jobs(now - HOUR_MS, 0)
        .await
        .unwrap();
    assert_eq!(none.jobs, 0);
}
