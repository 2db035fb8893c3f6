//! A pool gives a connection back to its idle queue after a ping, a round
//! trip per call, unless told not to: the pool option `test_on_release`,
//! which the patched `sqlx-core` in `vendor/` adds (see `vendor/PATCHES.md`).
//! A ping that fails (here: the connection's backend was terminated while
//! the connection was out) closes the connection; without the ping, it
//! rejoins the idle queue as it is.

use std::time::{Duration, Instant};

use sqlx::{PgPool, postgres::PgPoolOptions};

const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// What became of a pool's one connection once it was given back after its
/// backend had been terminated: `(connections open, connections idle)`.
async fn after_giving_back_a_dead_connection(test_on_release: bool) -> (u32, usize) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .test_on_release(test_on_release)
        .connect(POSTGRES)
        .await
        .expect("Postgres on 127.0.0.1:5432");
    let mut conn = pool.acquire().await.expect("acquire");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .expect("pid");
    let admin = PgPool::connect(POSTGRES).await.expect("admin");
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 10000)")
        .bind(pid)
        .fetch_one(&admin)
        .await
        .expect("terminate");
    assert!(terminated, "backend {pid} did not end");
    admin.close().await;

    drop(conn);
    // The connection goes back through a task of its own: wait until it
    // has either closed or rejoined the idle queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.size() == 1 && pool.num_idle() == 0 {
        assert!(Instant::now() < deadline, "the connection never came back");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outcome = (pool.size(), pool.num_idle());
    pool.close().await;
    outcome
}

#[tokio::test]
async fn a_connection_given_back_is_pinged_by_default() {
    assert_eq!(
        after_giving_back_a_dead_connection(true).await,
        (0, 0),
        "the failed ping closes the connection"
    );
}

#[tokio::test]
async fn a_pool_told_not_to_ping_on_release_does_not() {
    assert_eq!(
        after_giving_back_a_dead_connection(false).await,
        (1, 1),
        "the connection rejoins the idle queue unpinged"
    );
}
