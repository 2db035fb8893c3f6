//! Fair scheduling between tenants (`docs/design.md`, Fair scheduling):
//! one tenant's backlog does not make another's job wait behind it, and a
//! Redis worker that dies holding messages gives them back within seconds.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::common::{Backend, QueueShape, TestEnv, wait, wait_for_a_blocked_statement};

const BACKLOG: usize = 2_000;

fn millis(job: &Value, field: &str) -> i64 {
    let text = job[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {job}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{field} {text}: {e}"))
        .timestamp_millis()
}

async fn a_tenants_job_starts_within_a_second_behind_another_tenants_backlog(shape: QueueShape) {
    let running = shape.start(&[("WORKER_CONCURRENCY", "2")]).await;
    let (env, api) = (&running.env, &running.api);
    // Tenant A: 2,000 sleeps of 50 ms, two at a time: 50 s of work in FIFO.
    futures::stream::iter(0..BACKLOG)
        .map(|_| api.submit("sleep", json!({"ms": 50})))
        .buffer_unordered(32)
        .collect::<Vec<Value>>()
        .await;

    let tenant_b = api.as_tenant_b();
    let job = tenant_b.submit("sleep", json!({"ms": 1})).await;
    let done = tenant_b.wait_final(job["job_id"].as_str().unwrap()).await;

    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    let waited = millis(&done, "started_at") - millis(&done, "created_at");
    let a_waiting = env
        .count("SELECT COUNT(*) FROM jobs WHERE tenant_id = 'tenant-a' AND status = 'QUEUED'")
        .await;
    assert!(
        a_waiting > (BACKLOG / 2) as i64,
        "tenant A's backlog is mostly still waiting ({a_waiting} jobs) when B's job has run"
    );
    assert!(
        waited <= 1_000,
        "tenant B's job started {waited} ms after its submit, behind {a_waiting} of A's"
    );
}

crate::on_every_queue_shape!(a_tenants_job_starts_within_a_second_behind_another_tenants_backlog);

/// Blocks claims of the job: its row is locked by a transaction of the
/// test's until the returned connection is dropped.
async fn lock_job_row(env: &TestEnv, job_id: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&env.database_url)
        .await
        .expect("the test database");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; SELECT 1 FROM jobs WHERE job_id = '{job_id}' FOR UPDATE"
    )))
    .execute(&mut conn)
    .await
    .expect("lock the job row");
    conn
}

/// Terminates the sessions waiting for a lock that `conn` holds.
async fn end_statements_blocked_by(conn: &mut sqlx::PgConnection) {
    sqlx::raw_sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
    )
    .execute(conn)
    .await
    .expect("end the blocked statements");
}

/// Messages held in flight by this test's consumers, in Redis.
async fn in_flight(env: &TestEnv) -> usize {
    let mut conn = env.redis().await;
    let lists: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:jobs:inflight:*", env.queue_name))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    let mut held = 0;
    for list in lists {
        let len: usize = redis::cmd("LLEN")
            .arg(list)
            .query_async(&mut conn)
            .await
            .expect("LLEN");
        held += len;
    }
    held
}

/// A worker killed (-9) after it fetched a message from Redis and before
/// it claimed the job: the message is back in the queue once its heartbeat
/// lapses (seconds), not after `REPUBLISH_AFTER` (five minutes here).
/// Where the job row is the queue there is no such window: a fetch is the
/// claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_a_killed_worker_come_back_within_seconds() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("REPUBLISH_AFTER", "5m")])
        .await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let mut lock = lock_job_row(&env, &job_id).await;

    let mut victim = env.start_worker(&[]);
    wait::until_true(
        "the worker fetched the message",
        Duration::from_secs(20),
        async || in_flight(&env).await > 0,
    )
    .await;
    // It fetched, and waits on the row lock to claim.
    wait_for_a_blocked_statement(&env).await;
    victim.kill_hard();
    // A claim is one statement committed on its own: Postgres, which
    // notices a vanished client only when it next talks to it, would
    // still commit the dead worker's claim once the lock is gone. End the
    // dead worker's waiting statement as a crash before the claim would.
    end_statements_blocked_by(&mut lock).await;
    drop(lock);
    let killed_at = std::time::Instant::now();

    let _survivor = env.start_worker(&[]);
    let done = api.wait_final(&job_id).await;
    let took = killed_at.elapsed();
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 1, "the killed worker never claimed it");
    assert!(
        took < Duration::from_secs(30),
        "the message came back {took:?} after the kill"
    );
    // Acknowledged with the survivor's next fetch: at once when busy,
    // within its one-second look when idle.
    wait::until_true(
        "the finished message acknowledged",
        Duration::from_secs(3),
        async || in_flight(&env).await == 0,
    )
    .await;
}

/// Messages waiting in this test's Redis queue (all tenants).
async fn waiting(env: &TestEnv) -> usize {
    let mut conn = env.redis().await;
    redis::cmd("ZCARD")
        .arg(format!("{}:jobs:queued:tenant-a", env.queue_name))
        .query_async(&mut conn)
        .await
        .expect("ZCARD")
}

/// A Redis worker takes no more messages than it has free slots: the rest
/// wait in the queue, where a second worker that starts takes them, rather
/// than behind the first worker's running jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_worker_holds_no_more_messages_than_it_has_free_slots() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    // Once the relay found the new queue and marked it intact; before, it
    // would publish the jobs a second time, as after a loss.
    let mut conn = env.redis().await;
    let intact = format!("{}:jobs:intact", env.queue_name);
    wait::until_true(
        "the queue marked intact",
        Duration::from_secs(30),
        async || {
            redis::cmd("EXISTS")
                .arg(&intact)
                .query_async::<bool>(&mut conn)
                .await
                .expect("EXISTS")
        },
    )
    .await;
    let mut job_ids = Vec::new();
    for _ in 0..6 {
        job_ids.push(
            api.submit("sleep", json!({"ms": 3000})).await["job_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let _first = env.start_worker(&[("WORKER_CONCURRENCY", "2")]);
    // Its one fetch with two free slots took two messages; with none free
    // it fetches nothing more. Looked at from its start until both run.
    let mut most = 0;
    wait::until_ok(
        "two messages taken, four waiting",
        Duration::from_secs(30),
        async || {
            let (held, left) = (in_flight(&env).await, waiting(&env).await);
            most = most.max(held);
            let running = api.job(&job_ids[1]).await["status"] == "RUNNING";
            if running && held == 2 && left == 4 {
                Ok(())
            } else {
                Err((held, left))
            }
        },
    )
    .await;
    assert_eq!(most, 2, "one message per slot");
    api.wait_status(&job_ids[0], "RUNNING").await;

    let _second = env.start_worker(&[("WORKER_CONCURRENCY", "2")]);
    api.wait_status(&job_ids[2], "RUNNING").await;
    api.wait_status(&job_ids[3], "RUNNING").await;
    assert_eq!(
        api.job(&job_ids[0]).await["status"],
        "RUNNING",
        "taken while the first worker's jobs still run"
    );
    for job_id in &job_ids {
        assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    }
}
