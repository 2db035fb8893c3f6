//! Per-tenant limits: a tenant over one gets 429 problem+json with a
//! Retry-After of whole seconds, nothing changes, and other tenants and the
//! service endpoints are not affected.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{Api, Backend, Reply, StoreOf, TestEnv, wait};

fn assert_too_many(reply: &Reply) {
    reply.assert_problem(429);
    let retry_after: u64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1, "Retry-After {retry_after}");
}

async fn job_count(env: &TestEnv) -> usize {
    let store = env.store().await;
    let filter = store::JobFilter {
        limit: 1000,
        ..Default::default()
    };
    let a = store.list_jobs("tenant-a", &filter).await.unwrap().len();
    let b = store.list_jobs("tenant-b", &filter).await.unwrap().len();
    a + b
}

/// An api whose jobs stay queued: no worker runs them.
async fn api_without_workers(env: &TestEnv, settings: &[(&str, &str)]) -> Api {
    let mut settings = settings.to_vec();
    settings.push(("EMBEDDED_WORKER", "false"));
    env.start_api(&settings).await
}

async fn a_tenant_over_its_request_rate_gets_429_and_no_one_else_does(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("RATE_LIMIT", "5")]).await;
    let mut refused = None;
    for _ in 0..40 {
        let reply = api.get("/v1/jobs").await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(reply);
            break;
        }
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    let refused = refused.expect("a burst of 40 is over 5/s with a burst of 10");
    assert_too_many(&refused);

    assert_eq!(
        api.as_tenant_b().get("/v1/jobs").await.status,
        StatusCode::OK
    );
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        for _ in 0..20 {
            let reply = Api::read(api.client.get(api.url(path))).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
        }
    }
}

async fn a_submit_over_max_active_jobs_is_refused_and_stores_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_without_workers(&env, &[("MAX_ACTIVE_JOBS", "3")]).await;
    let mut first = None;
    for _ in 0..3 {
        first.get_or_insert(api.submit("sleep", json!({"ms": 1})).await);
    }
    let submit_with_key = || {
        api.client
            .post(api.url("/v1/reports/sleep"))
            .bearer_auth(&api.key)
            .header("Idempotency-Key", "the-fourth")
            .json(&json!({"ms": 1}))
    };
    let refused = Api::read(submit_with_key()).await;
    assert_too_many(&refused);
    assert_eq!(job_count(&env).await, 3, "nothing stored");
    // Another tenant is not held to tenant-a's count.
    api.as_tenant_b().submit("sleep", json!({"ms": 1})).await;

    // Once a job is no longer active, the same key goes through.
    let job_id = first.unwrap()["job_id"].as_str().unwrap().to_owned();
    let cancelled = api
        .send(Method::POST, &format!("/v1/jobs/{job_id}/cancel"), None)
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.text);
    // Sent again, as the refusal's Retry-After asks, until the count the
    // api keeps for a second has seen the cancel.
    let accepted = wait::until_ok(
        "the same key accepted",
        Duration::from_secs(10),
        async || {
            let reply = Api::read(submit_with_key()).await;
            if reply.status == StatusCode::ACCEPTED {
                Ok(reply)
            } else {
                assert_too_many(&reply);
                Err(reply.status)
            }
        },
    )
    .await;
    assert!(
        accepted.header("idempotent-replayed").is_none(),
        "it ran now"
    );
}

async fn webhooks_beyond_max_webhooks_are_refused(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_without_workers(
        &env,
        &[("MAX_WEBHOOKS", "2"), ("WEBHOOK_ALLOW_PRIVATE", "true")],
    )
    .await;
    let hook = json!({"url": "http://127.0.0.1:9/hook"});
    for _ in 0..2 {
        let reply = api.post("/v1/webhooks", &hook).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    assert_too_many(&api.post("/v1/webhooks", &hook).await);
    assert_eq!(
        api.get("/v1/webhooks").await.json()["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // A webhook for one job goes with its job and is not counted.
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let per_job = json!({"url": "http://127.0.0.1:9/hook", "job_id": job["job_id"]});
    let reply = api.post("/v1/webhooks", &per_job).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

/// Registrations sent at once, all for all jobs or all for one job: each
/// 201 or 429, and the webhooks made, as listed.
async fn register_at_once(api: &Api, hook: &serde_json::Value, n: usize) -> (usize, usize) {
    let replies = futures::future::join_all((0..n).map(|_| api.post("/v1/webhooks", hook))).await;
    let created = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    for reply in replies.iter().filter(|r| r.status != StatusCode::CREATED) {
        assert_too_many(reply);
    }
    let listed = api.get("/v1/webhooks?limit=200").await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["job_id"] == hook["job_id"])
        .count();
    (created, listed)
}

/// The caps hold for registrations at once: each is checked in the
/// transaction that inserts, after a lock the others wait for.
async fn webhooks_registered_at_once_stop_exactly_at_their_caps(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_without_workers(
        &env,
        &[
            ("MAX_WEBHOOKS", "3"),
            ("MAX_WEBHOOKS_PER_JOB", "3"),
            ("RATE_LIMIT", "1000"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ],
    )
    .await;

    let tenant_wide = register_at_once(&api, &json!({"url": "http://127.0.0.1:9/hook"}), 16).await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let per_job = json!({"url": "http://127.0.0.1:9/hook", "job_id": job["job_id"]});
    let for_one_job = register_at_once(&api, &per_job, 16).await;

    assert_eq!(tenant_wide, (3, 3), "created, listed: MAX_WEBHOOKS");
    assert_eq!(for_one_job, (3, 3), "created, listed: MAX_WEBHOOKS_PER_JOB");
    // Refused, the same Idempotency-Key may be sent again later.
    let keyed = api
        .client
        .post(api.url("/v1/webhooks"))
        .bearer_auth(&api.key)
        .header("idempotency-key", "hook-later")
        .json(&json!({"url": "http://127.0.0.1:9/hook"}));
    assert_too_many(&Api::read(keyed).await);
    let list = api.get("/v1/webhooks?limit=200").await.json();
    let first = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["job_id"].is_null())
        .and_then(|w| w["id"].as_str())
        .expect("a webhook for all jobs")
        .to_owned();
    let deleted = api
        .send(Method::DELETE, &format!("/v1/webhooks/{first}"), None)
        .await;
    assert!(deleted.status.is_success(), "{}", deleted.text);
    let again = api
        .client
        .post(api.url("/v1/webhooks"))
        .bearer_auth(&api.key)
        .header("idempotency-key", "hook-later")
        .json(&json!({"url": "http://127.0.0.1:9/hook"}));
    let again = Api::read(again).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
}

async fn long_polls_beyond_max_long_polls_are_refused(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_without_workers(&env, &[("MAX_LONG_POLLS", "2")]).await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let path = format!("/v1/jobs/{}?wait=4", job["job_id"].as_str().unwrap());
    // Three at once: whichever comes third is refused at once, while the
    // other two hold their places for 4 s.
    let mut polls: futures::stream::FuturesUnordered<_> = (0..3)
        .map(|_| {
            let request = api.client.get(api.url(&path)).bearer_auth(&api.key);
            tokio::spawn(Api::read(request))
        })
        .collect();
    let first_answer = {
        use futures::StreamExt;
        polls.next().await.expect("a long poll").unwrap()
    };
    assert_too_many(&first_answer);
    let held: Vec<_> = polls.into_iter().collect();
    // And while they wait, a further one is refused too.
    assert_too_many(&api.get(&path).await);
    // Tenant B has places of its own; a plain GET is never a long poll.
    assert_eq!(
        api.as_tenant_b().get("/v1/jobs?limit=1").await.status,
        StatusCode::OK
    );
    assert_eq!(
        api.get(&format!("/v1/jobs/{}", job["job_id"].as_str().unwrap()))
            .await
            .status,
        StatusCode::OK
    );
    for poll in held {
        assert_eq!(poll.await.unwrap().status, StatusCode::OK);
    }
    // Their places are free again.
    let again = api
        .get(&format!(
            "/v1/jobs/{}?wait=1",
            job["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
}

crate::on_both_backends!(
    a_tenant_over_its_request_rate_gets_429_and_no_one_else_does,
    a_submit_over_max_active_jobs_is_refused_and_stores_nothing,
    webhooks_beyond_max_webhooks_are_refused,
    webhooks_registered_at_once_stop_exactly_at_their_caps,
    long_polls_beyond_max_long_polls_are_refused,
);

/// Statements of this test's database waiting for a lock.
async fn blocked_statements(env: &TestEnv) -> i64 {
    env.count(
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0",
    )
    .await
}

/// `DATABASE_POOL_SIZE` bounds the connections a process opens: with the
/// `jobs` table locked, reads beyond the pool wait for a connection and
/// are answered 503 when none comes, while exactly the pool's connections
/// wait on the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_opens_no_more_connections_than_its_pool_size() {
    use sqlx::Connection;
    const POOL_SIZE: i64 = 4;
    const READS: usize = 12;
    let env = TestEnv::new(Backend::PgRedis).await;
    let pool_size = POOL_SIZE.to_string();
    let api = api_without_workers(&env, &[("DATABASE_POOL_SIZE", &pool_size)]).await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let path = format!("/v1/jobs/{}", job["job_id"].as_str().unwrap());

    let mut lock = sqlx::PgConnection::connect(&env.database_url)
        .await
        .expect("the test database");
    sqlx::raw_sql("BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut lock)
        .await
        .expect("lock the jobs table");
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..READS {
        reads.spawn(Api::read(api.request(Method::GET, &path)));
    }
    wait::until_true(
        "the pool's connections waiting on the lock",
        Duration::from_secs(20),
        async || blocked_statements(&env).await >= POOL_SIZE,
    )
    .await;
    // The first answer comes when a read has waited its 5 s for a
    // connection; the pool's own are still held by the lock meanwhile.
    let first = tokio::time::timeout(Duration::from_secs(30), reads.join_next())
        .await
        .expect("a read answered while the table is locked")
        .expect("a read")
        .expect("a read task");
    first.assert_problem(503);
    assert!(first.header("retry-after").is_some(), "Retry-After");
    assert_eq!(blocked_statements(&env).await, POOL_SIZE);

    sqlx::raw_sql("ROLLBACK")
        .execute(&mut lock)
        .await
        .expect("release the lock");
    let mut answered = vec![first.status];
    while let Some(read) = reads.join_next().await {
        answered.push(read.expect("a read task").status);
    }
    let ok = answered.iter().filter(|s| **s == StatusCode::OK).count();
    assert!(
        answered
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::SERVICE_UNAVAILABLE),
        "{answered:?}"
    );
    assert!(
        ok >= 1,
        "the reads holding connections end once the lock goes: {answered:?}"
    );
    assert_eq!(api.get(&path).await.status, StatusCode::OK);
}
