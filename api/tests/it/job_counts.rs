//! The dashboard's job counters (`job_counts`, `job_minutes` and their
//! deltas), kept by triggers on `jobs`: after submits, successes,
//! failures, retries, cancels and retention's pruning, and while many of
//! those happen at once, they equal a `COUNT(*) GROUP BY` of the jobs.

use std::time::Duration;

use serde_json::{Value, json};
use store::Store;

use crate::common::{Api, Backend, StoreOf, TestEnv, moment_sql, wait};

/// The (tenant, kind, status) whose counter differs from the jobs table,
/// in one statement and so one snapshot, deltas not yet folded included.
const COUNTS_OFF: &str = "SELECT COUNT(*) FROM (
    SELECT tenant_id, kind, status FROM (
        SELECT tenant_id, kind, status, n FROM job_counts
        UNION ALL SELECT tenant_id, kind, status, delta FROM job_count_deltas
        UNION ALL SELECT tenant_id, kind, status, -COUNT(*) FROM jobs
            GROUP BY tenant_id, kind, status
    ) AS x GROUP BY tenant_id, kind, status HAVING SUM(n) <> 0
) AS y";

/// The same for the finished jobs per minute (a minute is the moment it
/// starts on Postgres, its number on SQLite).
fn minutes_off(backend: Backend) -> String {
    let minute = match backend {
        Backend::PgRedis => "date_trunc('minute', finished_at)",
        Backend::Sqlite => "finished_at / 60000",
    };
    format!(
        "SELECT COUNT(*) FROM (
            SELECT tenant_id, minute, status FROM (
                SELECT tenant_id, minute, status, n FROM job_minutes
                UNION ALL SELECT tenant_id, minute, status, delta FROM job_count_deltas
                    WHERE minute IS NOT NULL
                UNION ALL SELECT tenant_id, {minute}, status, -COUNT(*) FROM jobs
                    WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                      AND finished_at IS NOT NULL
                    GROUP BY tenant_id, {minute}, status
            ) AS x GROUP BY tenant_id, minute, status HAVING SUM(n) <> 0
        ) AS y"
    )
}

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

async fn assert_counters_exact(env: &TestEnv, when: &str) {
    assert_eq!(env.count(COUNTS_OFF).await, 0, "job_counts differ {when}");
    assert_eq!(
        env.count(&minutes_off(env.backend)).await,
        0,
        "job_minutes differ {when}"
    );
}

/// What the overview shows for tenant-a, checked against the jobs table
/// read directly.
async fn assert_overview_exact(env: &TestEnv, store: &Store) {
    let counts = store.job_counts("tenant-a").await.expect("counts");
    for status in ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"] {
        let expected = env
            .count(&format!(
                "SELECT COUNT(*) FROM jobs WHERE tenant_id = 'tenant-a' AND status = '{status}'"
            ))
            .await;
        let shown = counts
            .by_status
            .get(&shared::model::JobStatus::parse(status).unwrap())
            .copied()
            .unwrap_or(0);
        assert_eq!(shown, expected, "{status} shown");
    }
    for (kind, by_status) in &counts.by_kind {
        let expected = env
            .count(&format!(
                "SELECT COUNT(*) FROM jobs WHERE tenant_id = 'tenant-a' AND kind = '{kind}'"
            ))
            .await;
        assert_eq!(by_status.values().sum::<i64>(), expected, "kind {kind}");
    }
    let minutes = store.throughput("tenant-a", 60).await.expect("throughput");
    let since = minutes[0].start;
    for (column, status) in [(0, "SUCCEEDED"), (1, "FAILED"), (2, "CANCELLED")] {
        let expected = env
            .count(&format!(
                "SELECT COUNT(*) FROM jobs WHERE tenant_id = 'tenant-a' AND status = '{status}'
                 AND finished_at >= {}",
                moment_sql(env.backend, &since.to_string())
            ))
            .await;
        let shown: i64 = minutes
            .iter()
            .map(|m| [m.succeeded, m.failed, m.cancelled][column])
            .sum();
        assert_eq!(shown, expected, "{status} in the last hour");
    }
}

async fn cancel(api: &Api, job_id: &str) {
    api.post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
}

async fn retry(api: &Api, job_id: &str) -> Value {
    let reply = Api::read(
        api.client
            .post(api.url(&format!("/v1/jobs/{job_id}/retry")))
            .bearer_auth(&api.key)
            .header("idempotency-key", format!("retry-{job_id}")),
    )
    .await;
    assert_eq!(
        reply.status,
        reqwest::StatusCode::ACCEPTED,
        "{}",
        reply.text
    );
    reply.json()
}

/// Old final jobs, inserted with SQL, for retention to prune; in the
/// schema of the release before Postgres's own types when `before_native`.
async fn insert_old_jobs(env: &TestEnv, count: usize, before_native: bool) {
    let mut values = Vec::new();
    for i in 0..count {
        let status = ["SUCCEEDED", "FAILED", "CANCELLED"][i % 3];
        let millis = (1000 + i * 61_000).to_string();
        let (t, no) = if before_native {
            (millis, "0")
        } else {
            (moment_sql(env.backend, &millis), "false")
        };
        values.push(format!(
            "('job_00000000000000000000{i:012}', 'tenant-a', 'sleep', '{{}}', '{status}', 1, 5,
              {t}, {t}, {t}, {t}, {no})"
        ));
    }
    env.execute_sql(&format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
             created_at, started_at, finished_at, run_after, cancel_requested)
         VALUES {}",
        values.join(",")
    ))
    .await;
}

async fn the_counters_stay_exact_through_every_kind_of_change(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("RETRY_BASE_DELAY", "50ms"), ("JOB_LEASE", "2s")])
        .await;
    // Postgres + Redis runs its workers (and their pruner) apart.
    let _worker = (backend == Backend::PgRedis)
        .then(|| env.start_worker(&[("RETRY_BASE_DELAY", "50ms"), ("JOB_LEASE", "2s")]));
    let store = env.store().await;
    insert_old_jobs(&env, 30, false).await;
    assert_counters_exact(&env, "after an insert with SQL").await;

    // The pruner (JOB_RETENTION 7d) deletes the old jobs.
    wait::until_true("the old jobs pruned", Duration::from_secs(60), async || {
        env.count(&format!(
            "SELECT COUNT(*) FROM jobs WHERE finished_at < {}",
            moment_sql(env.backend, "10000000")
        ))
        .await
            == 0
    })
    .await;
    assert_counters_exact(&env, "after pruning").await;

    let succeeds = api.submit("sleep", json!({"ms": 1})).await;
    let fails = api
        .submit("sleep", json!({"fail_times": 1, "permanent": true}))
        .await;
    let retried_by_worker = api.submit("sleep", json!({"fail_times": 1})).await;
    let cancelled = api.submit("sleep", json!({"ms": 60000})).await;
    let other_kind = api.submit("gst-summary", json!({"month": "2026-01"})).await;
    api.wait_status(&id_of(&cancelled), "RUNNING").await;
    assert_counters_exact(&env, "with a job running").await;
    cancel(&api, &id_of(&cancelled)).await;
    for job in [
        &succeeds,
        &fails,
        &retried_by_worker,
        &cancelled,
        &other_kind,
    ] {
        api.wait_final(&id_of(job)).await;
    }
    let retry_of_failed = retry(&api, &id_of(&fails)).await;
    // The retry sleeps as long as the job it retries: stop it too.
    let retry_of_cancelled = retry(&api, &id_of(&cancelled)).await;
    cancel(&api, &id_of(&retry_of_cancelled)).await;
    api.wait_final(&id_of(&retry_of_failed)).await;
    api.wait_final(&id_of(&retry_of_cancelled)).await;
    let queued_cancel = api.submit("sleep", json!({"ms": 1, "fail_times": 0})).await;
    cancel(&api, &id_of(&queued_cancel)).await;
    api.wait_final(&id_of(&queued_cancel)).await;
    api.as_tenant_b().submit("sleep", json!({"ms": 1})).await;

    assert_counters_exact(&env, "after the mix").await;
    assert_overview_exact(&env, &store).await;
    store.fold_job_counts().await.expect("fold");
    assert_counters_exact(&env, "after a fold").await;
    assert_overview_exact(&env, &store).await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM job_count_deltas").await,
        0,
        "a fold leaves no delta"
    );
    assert_eq!(
        env.count("SELECT COUNT(*) FROM job_minutes WHERE n = 0")
            .await,
        0,
        "the pruned minutes are gone"
    );
}

async fn concurrent_status_changes_leave_the_counters_exact(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("RETRY_BASE_DELAY", "10ms"), ("WORKER_CONCURRENCY", "8")])
        .await;
    // A second process claiming and finishing jobs, on Postgres (SQLite's
    // embedded default has its one pool).
    let _worker = (backend == Backend::PgRedis)
        .then(|| env.start_worker(&[("RETRY_BASE_DELAY", "10ms"), ("WORKER_CONCURRENCY", "8")]));
    let store = env.store().await;
    let folding = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                store.fold_job_counts().await.expect("fold");
                // A folder of the test's own, racing the writers: its pace.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let clients: Vec<Api> = (0..6).map(|_| api.with_key(&api.key)).collect();
    let submitting = async {
        let ids =
            futures::future::join_all(clients.iter().enumerate().map(|(client, api)| async move {
                let mut ids = Vec::new();
                for i in 0..25 {
                    let params = match i % 4 {
                        0 => json!({"ms": 1}),
                        1 => json!({"fail_times": 1}),
                        2 => json!({"fail_times": 1, "permanent": true}),
                        _ => json!({"ms": 30}),
                    };
                    let job = api.submit("sleep", params).await;
                    if (i + client) % 5 == 0 {
                        cancel(api, &id_of(&job)).await;
                    }
                    ids.push(id_of(&job));
                }
                ids
            }))
            .await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        ids.concat()
    };
    let checking = async {
        let mut checks = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            assert_counters_exact(&env, "while jobs change").await;
            checks += 1;
        }
        checks
    };
    let (ids, checks) = tokio::join!(submitting, checking);
    for id in &ids {
        api.wait_final(id).await;
    }
    folding.abort();
    assert!(checks > 0);
    assert_counters_exact(&env, "once every job is final").await;
    store.fold_job_counts().await.expect("fold");
    assert_counters_exact(&env, "after the last fold").await;
    assert_overview_exact(&env, &store).await;
}

/// The migration counts the jobs already there.
async fn jobs_made_before_the_counters_existed_are_counted(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = env.store().await;
    let dir = match backend {
        Backend::Sqlite => "sqlite",
        Backend::PgRedis => "postgres",
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dir);
    let mut before = sqlx::migrate::Migrator::new(path)
        .await
        .expect("migrations");
    let earlier: Vec<_> = before
        .migrations
        .iter()
        .filter(|m| m.version < 20261203000040)
        .cloned()
        .collect();
    assert!(earlier.len() < before.migrations.len());
    before.migrations = earlier.into();
    before.dangerous_set_table_name("receipt_migrations");
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(store.url()).await.expect("pool");
    before.run(&pool).await.expect("earlier migrations");
    pool.close().await;

    insert_old_jobs(&env, 12, true).await;
    let now = shared::time::now_ms();
    env.execute_sql(&format!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
             created_at, started_at, finished_at, run_after, cancel_requested)
         VALUES ('job_1', 'tenant-a', 'sleep', '{{}}', 'QUEUED', 0, 5, {now}, NULL, NULL, {now}, 0),
                ('job_2', 'tenant-a', 'gst-summary', '{{}}', 'RUNNING', 1, 5, {now}, {now}, NULL,
                 {now}, 0),
                ('job_3', 'tenant-a', 'sleep', '{{}}', 'SUCCEEDED', 1, 5, {now}, {now}, {now},
                 {now}, 0),
                ('job_4', 'tenant-b', 'sleep', '{{}}', 'FAILED', 1, 5, {now}, {now}, {now},
                 {now}, 0)"
    ))
    .await;
    store.migrate().await.expect("migrate");
    assert!(env.count("SELECT COUNT(*) FROM job_counts").await > 0);
    assert_counters_exact(&env, "after the migration").await;
    assert_overview_exact(&env, &store).await;
}

crate::on_both_backends!(
    jobs_made_before_the_counters_existed_are_counted,
    the_counters_stay_exact_through_every_kind_of_change,
    concurrent_status_changes_leave_the_counters_exact,
);
