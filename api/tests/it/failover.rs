//! A Redis failover under load: the service reaches Redis through three
//! Sentinels of the test's own, and the primary is killed while retrying
//! clients submit. The Sentinels promote the replica; every connection of
//! the api and the worker must move to it by itself.

use std::time::{Duration, Instant};

use testkit::servers::{PrivatePostgres, PrivateRedis, PrivateSentinels};

use crate::{
    common::{Announcements, TestEnv, assert_announced_once, wait},
    faults::{Stream, assert_all_succeed, assert_up, count_where},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_succeeds_once_when_the_redis_primary_fails_over() {
    let postgres = PrivatePostgres::start();
    let mut primary = PrivateRedis::start();
    let replica = PrivateRedis::start_replica_of(&primary);
    let sentinels = PrivateSentinels::start(&primary, 3);
    assert_eq!(sentinels.primary_port(), Some(primary.port));

    let mut env =
        TestEnv::on_servers(&postgres.admin_url(), &postgres.url(), &sentinels.url()).await;
    // The default: messages lost with the primary come back through the
    // queue's own recovery, not a shortened republish.
    env.extra_env = vec![("REPUBLISH_AFTER".into(), "5m".into())];
    env.set("WEBHOOK_ALLOW_PRIVATE", "true");
    let mut api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut worker = env.start_worker(&[]);
    let announced = Announcements::start();
    announced.subscribe(&api).await;

    // 200 jobs of 50 ms on 4 slots: a backlog waits in Redis when the
    // primary dies.
    let stream = Stream::start(&api.base, 8, 25, 50);
    wait::until_true(
        "jobs run before the failover",
        Duration::from_secs(30),
        async || count_where(&env, "status = 'SUCCEEDED'").await >= 20,
    )
    .await;
    let queued = count_where(&env, "status = 'QUEUED'").await;
    assert!(queued > 0, "a backlog in the queue when the primary dies");

    primary.kill();
    let promoted = sentinels.wait_for_failover_from(primary.port);
    assert_eq!(promoted, replica.port, "the replica is the new primary");
    let switched = Instant::now();

    let accepted = stream.accepted().await;
    assert_eq!(accepted.len(), 200);
    assert_all_succeed(&env, &accepted, switched + Duration::from_secs(30)).await;
    let twice = count_where(&env, "attempts <> 1").await;
    assert_eq!(twice, 0, "every job ran in one attempt");
    let job_ids: Vec<&str> = accepted.iter().map(|(_, id)| id.as_str()).collect();
    assert_announced_once(&announced, &api, &job_ids, "job.succeeded").await;
    assert_up("worker", &mut worker);
    assert_up("api", api.process.as_mut().expect("api"));
}
