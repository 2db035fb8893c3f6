//! Queues deliver at least once; each of these leaves exactly one effect:
//! one attempt, one final status, announced once.

use std::time::Duration;

use clap::Parser;
use queue::Queue;
use serde_json::json;
use shared::settings::Settings;
use store::QueuedJob;

use crate::common::{
    Announcements, Api, Backend, RUNNER_DEBUG, StoreOf, TestEnv, assert_announced_once,
    attempts_counted, dropped_deliveries, metrics_url, wait,
};

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

/// What the queue carries for a job of the tests' first tenant: each call
/// a copy of its own (its own rank), as a republish makes, which the Redis
/// queue holds beside the others rather than as one.
fn queued(job_id: &str) -> QueuedJob {
    static COPIES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    QueuedJob {
        job_id: job_id.to_owned(),
        tenant_id: "tenant-a".to_owned(),
        rank_at: shared::time::now_ms() + COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    }
}

/// The test's processes may deliver to its receiver, on loopback.
async fn env_announcing(backend: Backend) -> TestEnv {
    let mut env = TestEnv::new(backend).await;
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    env
}

/// One attempt, and one final status, announced once.
async fn assert_ran_once(env: &TestEnv, api: &Api, announced: &Announcements, job_id: &str) {
    let store = env.store().await;
    let job = store.get_job_unscoped(job_id).await.unwrap().expect("job");
    assert_eq!(job.status.as_str(), "SUCCEEDED");
    assert_eq!(job.attempts, 1, "one attempt, however many deliveries");
    assert_announced_once(announced, api, &[job_id], "job.succeeded").await;
}

/// On Redis, where a message can be delivered more than once; where the
/// job rows are the queue there is no message to duplicate.
async fn duplicate_messages_concurrent_or_later_run_the_job_once(backend: Backend) {
    let env = env_announcing(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    let job = api.submit("sleep", json!({"ms": 300})).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let queue = queue_of(&env).await;
    // Five more copies wait in the queue before any worker runs: two
    // workers with four slots each take them at the same time.
    for _ in 0..5 {
        queue.publish(&[queued(&job_id)]).await.unwrap();
    }
    let first = env.start_worker(&[RUNNER_DEBUG]);
    let second = env.start_worker(&[RUNNER_DEBUG]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED");
    let finished_at = done["finished_at"].clone();

    // Copies delivered after the job finished: as when a worker dies after
    // writing the result but before acknowledging its message.
    queue
        .publish(&[queued(&job_id), queued(&job_id)])
        .await
        .unwrap();
    // Every copy but the one that ran is dropped: five before, two after.
    wait::until_true(
        "seven copies dropped",
        Duration::from_secs(30),
        async || dropped_deliveries(&[&first, &second]) >= 7,
    )
    .await;
    assert_ran_once(&env, &api, &announced, &job_id).await;
    assert_eq!(api.job(&job_id).await["finished_at"], finished_at);
}

async fn a_relay_that_publishes_again_before_the_claim_changes_nothing(backend: Backend) {
    let env = env_announcing(backend).await;
    // The relay republishes every 100 ms while no worker claims the job:
    // the same as a relay that crashed after publishing, before its rows
    // were marked, several times over.
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("REPUBLISH_AFTER", "100ms")])
        .await;
    let announced = Announcements::start();
    announced.subscribe(&api).await;
    // Delayed a second, so that the relay publishes it (a job the api
    // pushes to Redis itself has no row to publish again).
    let reply = api
        .post("/v1/reports/sleep?delay=1", &json!({"ms": 50}))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let job_id = reply.json()["job_id"].as_str().unwrap().to_owned();
    // Published four times at least (the row's republish delay doubles
    // from 100 ms on each: 800 ms after the fourth).
    wait::until_true(
        "the job published four times",
        Duration::from_secs(10),
        async || {
            env.count(&format!(
                "SELECT COUNT(*) FROM outbox WHERE job_id = '{job_id}' AND republish_ms >= 800"
            ))
            .await
                == 1
        },
    )
    .await;
    // One slot: the worker handles each copy to its end, in order, before
    // it takes a message queued after them.
    let _worker = env.start_worker(&[("WORKER_CONCURRENCY", "1")]);
    assert_eq!(api.wait_final(&job_id).await["status"], "SUCCEEDED");
    assert_ran_once(&env, &api, &announced, &job_id).await;
}

/// Two workers, every job delivered twice (the test publishes each once
/// more): each still runs once.
async fn two_workers_given_every_job_twice_run_each_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut job_ids = Vec::new();
    for _ in 0..60 {
        let job = api.submit("sleep", json!({"ms": 5})).await;
        job_ids.push(job["job_id"].as_str().unwrap().to_owned());
    }
    let messages: Vec<QueuedJob> = job_ids.iter().map(|id| queued(id)).collect();
    queue_of(&env).await.publish(&messages).await.unwrap();
    // A lease no stall on a busy machine outlasts: a second attempt here
    // could only come from a second delivery.
    let settings = [
        ("METRICS_ADDR", "127.0.0.1:0"),
        ("JOB_LEASE", "30s"),
        RUNNER_DEBUG,
    ];
    let workers = [env.start_worker(&settings), env.start_worker(&settings)];
    for job_id in &job_ids {
        assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    }
    let store = env.store().await;
    for job_id in &job_ids {
        let job = store.get_job_unscoped(job_id).await.unwrap().expect("job");
        assert_eq!(job.attempts, 1, "one attempt, however many deliveries");
    }
    // Every second delivery has been dropped (where the job rows are the
    // queue a publish only wakes the workers: there is no copy to drop);
    // the kind ran once per job.
    let [first, second] = &workers;
    if env.uses_redis() {
        wait::until_true(
            "sixty copies dropped",
            Duration::from_secs(30),
            async || dropped_deliveries(&[first, second]) >= 60,
        )
        .await;
    }
    let mut ran = 0;
    for worker in &workers {
        let metrics = reqwest::get(metrics_url(worker)).await.unwrap();
        let counted = attempts_counted(&metrics.text().await.unwrap(), "sleep");
        ran += counted.values().sum::<u64>();
    }
    assert_eq!(ran, 60, "the kind ran once per job");
}

crate::on_both_backends!(two_workers_given_every_job_twice_run_each_once,);

/// Only Redis has a relay: where the job rows are the queue nothing is
/// published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_publishes_again_before_the_claim_changes_nothing_on_redis() {
    a_relay_that_publishes_again_before_the_claim_changes_nothing(Backend::PgRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_messages_on_redis_run_the_job_once() {
    duplicate_messages_concurrent_or_later_run_the_job_once(Backend::PgRedis).await;
}

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(duplicate_messages_concurrent_or_later_run_the_job_once,);
