//! A rolling upgrade with jobs in flight, from the previous release's
//! binaries (`scripts/previous-release` builds them into `target/`) to
//! this build's, in the order docs/operations.md gives: the old api and
//! workers run with jobs running and queued; this release's workers start
//! (the first migrates); the old workers stop with SIGTERM; then the api is
//! replaced. Old and new processes run side by side the whole time, under
//! retrying clients: every job completes once, with no 5xx but 503s. A
//! migration the old binaries cannot run beside fails this test.

use std::time::{Duration, Instant};

use testkit::previous_release_binary;

use crate::common::{Api, Process, TestEnv, wait};
use crate::faults::{Stream, Target, assert_all_succeed, assert_up, count_where};

fn previous(name: &str) -> std::path::PathBuf {
    previous_release_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

fn started(process: Process) -> Process {
    process.wait_for_line("metrics on http://");
    process
}

fn old_worker(env: &TestEnv) -> Process {
    started(env.spawn_at(
        &previous("worker"),
        "worker",
        &[("METRICS_ADDR", "127.0.0.1:0")],
    ))
}

fn new_worker(env: &TestEnv) -> Process {
    started(env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]))
}

async fn a_rolling_upgrade_with_jobs_in_flight_runs_every_job_once(env: TestEnv) {
    // The previous release: its api (which migrates) and two workers.
    let mut old_api =
        Api::once_listening(env.spawn_at(&previous("api"), "api", &[("EMBEDDED_WORKER", "false")]));
    let mut old_workers = [old_worker(&env), old_worker(&env)];
    let target = Target::new(&old_api.base);
    let stream = Stream::start_on(&target, 4, 40, 300);
    stream
        .wait_until("30 submits accepted", |a| a.accepted() >= 30)
        .await;
    wait::until_true("jobs running", Duration::from_secs(30), async || {
        count_where(&env, "status = 'RUNNING'").await > 0
    })
    .await;

    // This release's workers join (the first to start migrates) and run
    // beside the old ones.
    let mut new_workers = [new_worker(&env), new_worker(&env)];
    let accepted = stream.answers.accepted();
    stream
        .wait_until("20 more submits accepted beside both releases", |a| {
            a.accepted() >= accepted + 20
        })
        .await;

    // The old workers stop with SIGTERM while their jobs run: they finish
    // them or hand them back.
    for worker in &mut old_workers {
        let status = worker
            .terminate()
            .expect("the old worker stopped within 30 s");
        assert!(status.success(), "the old worker stopped cleanly: {status}");
    }
    // The api is replaced: this release's first, then the old one stops.
    let new_api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    target.point_at(&new_api.base);
    let process = old_api.process.as_mut().expect("the old api");
    let status = process
        .terminate()
        .expect("the old api stopped within 30 s");
    assert!(status.success(), "the old api stopped cleanly: {status}");
    let replaced = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 160);
    assert_all_succeed(&env, &accepted, replaced + Duration::from_secs(60)).await;
    for worker in &mut new_workers {
        assert_up("new worker", worker);
    }
}

crate::on_both_production_queues!(a_rolling_upgrade_with_jobs_in_flight_runs_every_job_once);
