//! A Redis that reaches `maxmemory`, on a Redis of the test's own: with
//! `noeviction` (the right setting) its writes fail with OOM, submits are
//! still accepted through the outbox, and every job runs once when memory
//! is free again; with an eviction policy (a misconfiguration that
//! happens) evicted queue keys are found by the lost-message sweep and
//! their jobs run, and every process warns at start.

use std::time::{Duration, Instant};

use testkit::servers::{PrivatePostgres, PrivateRedis};

use crate::common::{KEY_A, wait};
use crate::faults::{Stream, assert_all_succeed, assert_up, production_shape};

const RECOVERY: Duration = Duration::from_secs(30);

/// Fills Redis with keys of its own (`filler:N`, each with a TTL, so a
/// `volatile-*` policy may evict them) until `done` says so (or 60 s
/// pass); answers how many it wrote.
async fn fill_until(redis: &PrivateRedis, what: &str, done: impl Fn(&PrivateRedis) -> bool) -> u64 {
    let client = redis::Client::open(redis.url()).expect("a client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let value = "x".repeat(1024);
    let mut n = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(redis) {
        assert!(Instant::now() < deadline, "{what} within 60 s");
        let mut pipe = redis::pipe();
        for _ in 0..200 {
            pipe.set_ex(format!("filler:{n}"), &value, 3600).ignore();
            n += 1;
        }
        // Refused (OOM) once full under noeviction: that is the point.
        let _: redis::RedisResult<()> = pipe.query_async(&mut conn).await;
    }
    n
}

/// Deletes the keys [`fill_until`] wrote, and only those.
async fn empty_fillers(redis: &PrivateRedis, written: u64) {
    let client = redis::Client::open(redis.url()).expect("a client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    for start in (0..written).step_by(1000) {
        let keys: Vec<String> = (start..written.min(start + 1000))
            .map(|n| format!("filler:{n}"))
            .collect();
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }
}

/// Commands Redis has refused for want of memory.
fn refused_for_memory(redis: &PrivateRedis) -> u64 {
    redis
        .query(&["INFO", "errorstats"])
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("errorstat_OOM:count="))
                .and_then(|count| count.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn used_memory(redis: &PrivateRedis) -> u64 {
    redis
        .info_field("used_memory")
        .and_then(|used| used.parse().ok())
        .expect("used_memory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_that_refuses_writes_delays_jobs_and_loses_none() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    let stream = Stream::start(&shape.api.base, 4, 30, 10);
    stream
        .wait_until("20 submits accepted", |a| a.accepted() >= 20)
        .await;

    // Full: a limit 2 MB above what it holds, filled.
    let limit = used_memory(&redis) + 2 * 1024 * 1024;
    redis.query(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.query(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let written = fill_until(&redis, "Redis full", |redis| {
        redis.query(&["SET", "probe", "1"]).is_none()
    })
    .await;
    // Held over its limit: the queue's own consumption (a fetch takes a
    // message out) cannot bring it back under, so every write is refused
    // until memory is freed.
    let over = used_memory(&redis) / 2;
    redis.query(&["CONFIG", "SET", "maxmemory", &over.to_string()]);
    // Submits go on being accepted (their jobs wait in the outbox) while
    // the processes' writes to Redis fail.
    let accepted = stream.answers.accepted();
    stream
        .wait_until("20 more submits accepted while full", |a| {
            a.accepted() >= accepted + 20
        })
        .await;
    let refused_at_full = refused_for_memory(&redis);
    wait::until_true(
        "the processes' writes refused for memory",
        Duration::from_secs(30),
        async || refused_for_memory(&redis) > refused_at_full,
    )
    .await;

    // Room again: the fillers go, the queue's own keys stay.
    empty_fillers(&redis, written).await;
    redis.query(&["DEL", "probe"]);
    redis.query(&["CONFIG", "SET", "maxmemory", "0"]);
    let freed = Instant::now();
    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 120);
    assert_all_succeed(&shape.env, &accepted, freed + RECOVERY).await;
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_evicted_from_a_full_redis_are_found_and_their_jobs_run_once() {
    let postgres = PrivatePostgres::start();
    let redis = PrivateRedis::start();
    redis.query(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    let mut shape = production_shape(&postgres, &redis).await;
    let api = &shape.api;
    for process in [api.process.as_ref().expect("api"), &shape.worker] {
        process
            .wait_for_lines_containing("maxmemory-policy is not noeviction", 1)
            .await;
    }
    // The relays have marked the queue intact.
    let intact = format!("{}:jobs:intact", shape.env.queue_name);
    wait::until_true(
        "the queue marked intact",
        Duration::from_secs(10),
        async || redis.query(&["EXISTS", &intact]).as_deref() == Some("1"),
    )
    .await;
    // The worker stops, and 40 jobs wait in Redis.
    shape.worker.kill_hard();
    let mut accepted = Vec::new();
    for n in 0..40 {
        let key = format!("evicted-{n}");
        let reply = api
            .client
            .post(api.url("/v1/reports/sleep"))
            .bearer_auth(KEY_A)
            .header("Idempotency-Key", &key)
            .json(&serde_json::json!({"ms": 1}))
            .send()
            .await
            .expect("an answer");
        assert_eq!(reply.status(), reqwest::StatusCode::ACCEPTED);
        let job: serde_json::Value = reply.json().await.expect("a job");
        accepted.push((key, job["job_id"].as_str().unwrap().to_owned()));
    }
    let queued = format!("{}:jobs:queued:tenant-a", shape.env.queue_name);
    assert_eq!(redis.query(&["EXISTS", &queued]).as_deref(), Some("1"));

    // Full, with keys evicted until the tenant's queue is among them, but
    // not the queue's bookkeeping: `:held` still says the jobs' messages
    // are there, and `:intact` that nothing was lost. (Under `volatile-lru`
    // only keys with a TTL are evicted: the fillers, and the tenant's queue
    // once it is given one here.)
    redis.query(&["EXPIRE", &queued, "3600"]);
    let limit = used_memory(&redis) + 2 * 1024 * 1024;
    redis.query(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let _ = fill_until(&redis, "the tenant's queue evicted", |redis| {
        redis.query(&["EXISTS", &queued]).as_deref() == Some("0")
    })
    .await;
    let prefix = format!("{}:jobs", shape.env.queue_name);
    for key in [format!("{prefix}:held"), format!("{prefix}:intact")] {
        assert_eq!(
            redis.query(&["EXISTS", &key]).as_deref(),
            Some("1"),
            "{key} was kept"
        );
    }
    let evicted = Instant::now();

    let _worker = shape.env.start_worker(&[]);
    assert_all_succeed(&shape.env, &accepted, evicted + RECOVERY).await;
    assert_up("api", shape.api.process.as_mut().expect("api"));
}
