//! A full disk under the database, on a volume of the test's own
//! (`testkit::volume`): a private Postgres whose data directory, WAL
//! included, is on it, or the embedded SQLite's `data/`. While it is full,
//! submits answer 503 with `Retry-After` (never a 500, never a 202 that is
//! later lost) and the processes stay up; once space returns, every
//! accepted job SUCCEEDED once, without a restart.

use std::time::{Duration, Instant};

use sqlx::Connection;
use testkit::{
    servers::{PrivatePostgres, PrivateRedis},
    volume::SmallVolume,
};

use crate::common::{Backend, TestEnv};
use crate::faults::{Stream, assert_all_succeed, assert_up, production_shape};

const RECOVERY: Duration = Duration::from_secs(30);

/// Fills `volume` once `stream` is under way, waits until its clients have
/// been refused (503) eight more times, frees it, and waits for every job.
async fn through_a_full_disk(env: &TestEnv, stream: Stream, volume: &SmallVolume) {
    stream
        .wait_until("20 submits accepted", |a| a.accepted() >= 20)
        .await;
    let refused = stream.answers.refused();
    volume.fill();
    stream
        .wait_until("8 submits refused while the disk is full", |a| {
            a.refused() >= refused + 8
        })
        .await;
    volume.free();
    let freed = Instant::now();
    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 160);
    assert_all_succeed(env, &accepted, freed + RECOVERY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_postgres_gives_503s_and_every_job_completes_once_space_returns() {
    let volume = SmallVolume::mount(256);
    let postgres = PrivatePostgres::start_in(volume.path());
    let redis = PrivateRedis::start();
    let mut shape = production_shape(&postgres, &redis).await;
    let stream = Stream::start(&shape.api.base, 4, 40, 10);
    through_a_full_disk(&shape.env, stream, &volume).await;
    assert_up("worker", &mut shape.worker);
    assert_up("api", shape.api.process.as_mut().expect("api"));
    drop(shape);
    drop(postgres);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_under_sqlite_gives_503s_and_recovers_with_a_whole_file() {
    let volume = SmallVolume::mount(32);
    let mut env = TestEnv::new(Backend::Sqlite).await;
    let file = volume.path().join("data").join("jobs.db");
    env.database_url = format!("sqlite://{}", file.display());
    let mut api = env.start_embedded().await;
    let stream = Stream::start(&api.base, 4, 40, 10);
    through_a_full_disk(&env, stream, &volume).await;
    assert_up("api", api.process.as_mut().expect("api"));

    let mut conn = sqlx::SqliteConnection::connect(&env.database_url)
        .await
        .expect("the database file");
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .expect("integrity_check");
    assert_eq!(check, "ok", "the file is whole");
    drop(api);
}
