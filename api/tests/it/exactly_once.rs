//! Queues deliver at least once; each of these leaves exactly one effect:
//! one attempt, one result write, one final status.

use std::time::Duration;

use clap::Parser;
use queue::Queue;
use serde_json::json;
use shared::settings::Settings;
use store::QueuedJob;

use crate::common::{Backend, TestEnv};

#[derive(Parser)]
struct SettingsOnly {
    #[command(flatten)]
    settings: Settings,
}

/// A publisher on the test's queue, to put duplicates in it on purpose.
async fn queue_of(env: &TestEnv) -> Queue {
    let mut args = vec![
        "test".to_owned(),
        "--database-url".to_owned(),
        env.database_url.clone(),
        "--queue-name".to_owned(),
        env.queue_name.clone(),
    ];
    if env.backend == Backend::PgRedis {
        args.extend([
            "--redis-url".to_owned(),
            crate::common::REDIS_URL.to_owned(),
        ]);
    }
    let settings = SettingsOnly::parse_from(args).settings;
    let store = env.store().await;
    Queue::connect(&settings, &store).await.expect("queue")
}

/// What the queue carries for a job of the tests' first tenant.
fn queued(job_id: &str) -> QueuedJob {
    QueuedJob {
        job_id: job_id.to_owned(),
        tenant_id: "tenant-a".to_owned(),
    }
}

async fn assert_ran_once(env: &TestEnv, job_id: &str) {
    let store = env.store().await;
    let job = store.get_job_unscoped(job_id).await.unwrap().expect("job");
    assert_eq!(job.status.as_str(), "SUCCEEDED");
    assert_eq!(job.attempts, 1, "one attempt, however many deliveries");
    assert_eq!(store.count_results(job_id).await.unwrap(), 1);
}

async fn duplicate_messages_concurrent_or_later_run_the_job_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job = api.submit("sleep", json!({"ms": 300})).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let queue = queue_of(&env).await;
    // Five more copies wait in the queue before any worker runs: two
    // workers with four slots each take them at the same time.
    for _ in 0..5 {
        queue.publish(&[queued(&job_id)]).await.unwrap();
    }
    let _first = env.start_worker(&[]);
    let _second = env.start_worker(&[]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED");
    let finished_at = done["finished_at"].clone();

    // Copies delivered after the job finished: as when a worker dies after
    // writing the result but before acknowledging its message.
    queue
        .publish(&[queued(&job_id), queued(&job_id)])
        .await
        .unwrap();
    let marker = api.submit("sleep", json!({"ms": 1})).await;
    api.wait_final(marker["job_id"].as_str().unwrap()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ran_once(&env, &job_id).await;
    assert_eq!(api.job(&job_id).await["finished_at"], finished_at);
}

async fn a_relay_that_publishes_again_before_the_claim_changes_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // The relay republishes every 100 ms while no worker claims the job:
    // the same as a relay that crashed after publishing, before its rows
    // were marked, several times over.
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("REPUBLISH_AFTER", "100ms")])
        .await;
    let job = api.submit("sleep", json!({"ms": 50})).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let _worker = env.start_worker(&[]);
    assert_eq!(api.wait_final(&job_id).await["status"], "SUCCEEDED");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_ran_once(&env, &job_id).await;
}

/// QUEUE_PREFETCH above 1: two workers fetch messages eight at a time,
/// every job delivered twice; each still runs once.
async fn prefetching_workers_run_each_job_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut job_ids = Vec::new();
    for _ in 0..60 {
        let job = api.submit("sleep", json!({"ms": 5})).await;
        job_ids.push(job["job_id"].as_str().unwrap().to_owned());
    }
    let messages: Vec<QueuedJob> = job_ids.iter().map(|id| queued(id)).collect();
    queue_of(&env).await.publish(&messages).await.unwrap();
    let _workers = [
        env.start_worker(&[("QUEUE_PREFETCH", "8")]),
        env.start_worker(&[("QUEUE_PREFETCH", "8")]),
    ];
    for job_id in &job_ids {
        assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    }
    let store = env.store().await;
    for job_id in &job_ids {
        let job = store.get_job_unscoped(job_id).await.unwrap().expect("job");
        assert_eq!(job.attempts, 1, "one attempt, however many deliveries");
        assert_eq!(store.count_results(job_id).await.unwrap(), 1);
    }
}

crate::on_both_backends!(
    prefetching_workers_run_each_job_once,
    duplicate_messages_concurrent_or_later_run_the_job_once,
    a_relay_that_publishes_again_before_the_claim_changes_nothing,
);

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(duplicate_messages_concurrent_or_later_run_the_job_once,);
