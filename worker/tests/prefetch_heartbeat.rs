//! A worker on apalis's SQLite queue fetches as Receipt configures it
//! (`queue::SQLITE_BATCH`, one message at a time), so no fetched task waits
//! in a busy worker's buffer, where apalis-core 1.0.0 stops the worker's
//! heartbeats and another worker reclaims every task of the busy one,
//! running ones included; none runs twice. With four per fetch, as
//! `QUEUE_PREFETCH=4` once gave, tasks ran twice.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use apalis::prelude::*;
use apalis_sqlite::{Config, SqlitePool, SqliteStorage};
use testkit::wait;

type Runs = Arc<Mutex<HashMap<u32, u32>>>;

/// Each task takes a while, so the tasks behind it wait in the buffer for
/// longer than the other worker's patience (two missed heartbeats of 1 s).
async fn slow_task(n: u32, runs: Data<Runs>) -> Result<(), BoxDynError> {
    *runs.lock().unwrap().entry(n).or_default() += 1;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

fn storage(pool: &SqlitePool, batch: usize) -> SqliteStorage<u32> {
    SqliteStorage::new(pool).with_config(
        Config::default()
            .queue("prefetch-heartbeat")
            .batch_size(batch)
            .heartbeat_interval(Duration::from_secs(1))
            .missed_heartbeats(2),
    )
}

fn run_worker(name: &str, storage: SqliteStorage<u32>, runs: Runs) -> tokio::task::JoinHandle<()> {
    let worker = WorkerBuilder::new(name)
        .backend(storage.poll_with_interval(Duration::from_millis(100)))
        .data(runs)
        .concurrency(1)
        .build(slow_task);
    tokio::spawn(async move {
        let _ = worker.run().await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_waiting_in_a_busy_workers_buffer_are_not_reclaimed_and_run_once() {
    let dir = tempfile_dir();
    let url = format!("sqlite://{}/queue.db?mode=rwc", dir.display());
    let pool = SqlitePool::connect(&url).await.expect("sqlite");
    SqliteStorage::setup(&pool).await.expect("setup");
    let mut producer = storage(&pool, 1);
    producer.push_bulk(vec![1, 2, 3, 4]).await.expect("push");

    let runs: Runs = Arc::default();
    // One slot, and slow tasks: were it to fetch more than one, the rest
    // would wait in its buffer.
    let busy = run_worker("busy", storage(&pool, queue::SQLITE_BATCH), runs.clone());
    wait::until_true(
        "the first task started",
        Duration::from_secs(20),
        async || !runs.lock().unwrap().is_empty(),
    )
    .await;
    // An idle worker on the same queue, whose heartbeats reclaim the tasks
    // of any worker silent for two seconds.
    let idle = run_worker("idle", storage(&pool, queue::SQLITE_BATCH), runs.clone());

    wait::until_ok("every task ran", Duration::from_secs(20), async || {
        let runs = runs.lock().unwrap().clone();
        if runs.len() == 4 { Ok(()) } else { Err(runs) }
    })
    .await;
    // Every task acknowledged as done: none is left that a reclaim could
    // hand out again, so a second run, had there been one, has shown.
    wait::until_ok("every task done", Duration::from_secs(20), async || {
        let not_done: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM Jobs WHERE job_type = 'prefetch-heartbeat' AND status <> 'Done'",
        )
        .fetch_one(&pool)
        .await
        .expect("the queue's table");
        if not_done == 0 { Ok(()) } else { Err(not_done) }
    })
    .await;
    busy.abort();
    idle.abort();
    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs,
        HashMap::from([(1, 1), (2, 1), (3, 1), (4, 1)]),
        "each task ran once"
    );
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("prefetch-heartbeat-{}", ulid::Ulid::generate()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
