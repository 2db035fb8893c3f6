//! Bounded storage: jobs final for longer than `JOB_RETENTION` are deleted
//! with their results, webhook events, delivery log and per-job webhooks,
//! while unfinished jobs, ledger entries and idempotency answers stay; and
//! the queue (Redis, or the job rows themselves) keeps nothing per
//! finished job.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use actix_web::{App, HttpResponse, HttpServer, web};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Api, Backend, TestEnv, moment_sql, wait};

/// A webhook receiver that acknowledges everything and remembers the
/// `webhook-id` (the event id) of each request.
struct Receiver {
    url: String,
    event_ids: Arc<Mutex<Vec<String>>>,
    handle: actix_web::dev::ServerHandle,
}

impl Receiver {
    fn start() -> Self {
        let event_ids = Arc::new(Mutex::new(Vec::new()));
        let seen = event_ids.clone();
        let server = HttpServer::new(move || {
            let seen = seen.clone();
            App::new().default_service(web::to(move |request: actix_web::HttpRequest| {
                let seen = seen.clone();
                async move {
                    if let Some(id) = request.headers().get("webhook-id") {
                        seen.lock()
                            .unwrap()
                            .push(id.to_str().unwrap_or_default().to_owned());
                    }
                    HttpResponse::NoContent().finish()
                }
            }))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .expect("bind the receiver");
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            url: format!("http://{addr}/hook"),
            event_ids,
            handle,
        }
    }

    fn received(&self) -> usize {
        self.event_ids.lock().unwrap().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        tokio::spawn(async move { handle.stop(false).await });
    }
}

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

fn quoted(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms_of(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().expect("a time"))
        .expect("RFC 3339")
        .timestamp_millis()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Waits until `GET /v1/jobs/{id}` answers 404, failing the test if that
/// takes past `deadline_ms` (unix ms). Returns when it was first seen gone.
async fn wait_gone(api: &Api, job_id: &str, deadline_ms: i64) -> i64 {
    let left = u64::try_from(deadline_ms - now_ms()).unwrap_or(0);
    wait::until_ok(
        &format!("job {job_id} gone by its deadline"),
        Duration::from_millis(left),
        async || {
            let reply = api.get(&format!("/v1/jobs/{job_id}")).await;
            if reply.status == StatusCode::NOT_FOUND {
                return Ok(now_ms());
            }
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            Err(reply.status)
        },
    )
    .await
}

/// Rows that hang off these jobs: (jobs, results, webhook events, their
/// deliveries, per-job webhooks).
async fn traces(env: &TestEnv, job_ids: &[String]) -> [i64; 5] {
    let ids = quoted(job_ids);
    [
        env.count(&format!("SELECT COUNT(*) FROM jobs WHERE job_id IN ({ids})"))
            .await,
        env.count(&format!(
            "SELECT COUNT(*) FROM job_results WHERE job_id IN ({ids})"
        ))
        .await,
        env.count(&format!(
            "SELECT COUNT(*) FROM webhook_events WHERE job_id IN ({ids})"
        ))
        .await,
        env.count(&format!(
            "SELECT COUNT(*) FROM webhook_deliveries d JOIN webhook_events e ON e.event_id = d.event_id
             WHERE e.job_id IN ({ids})"
        ))
        .await,
        env.count(&format!(
            "SELECT COUNT(*) FROM webhooks WHERE job_id IN ({ids})"
        ))
        .await,
    ]
}

const RETENTION_SECS: i64 = 10;

async fn finished_jobs_are_deleted_with_their_results_events_and_webhooks_after_the_retention(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let receiver = Receiver::start();
    let retention = format!("{RETENTION_SECS}s");
    // One slot: a long job holds it, so the job after it stays QUEUED.
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("JOB_RETENTION", &retention),
            ("WORKER_CONCURRENCY", "1"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ])
        .await;
    let imported = api
        .import(json!([
            {"id": "inv-1", "date": "2026-10-03", "direction": "sale", "amount": "100.00", "gst_rate": "18"},
            {"id": "bill-1", "date": "2026-10-05", "direction": "purchase", "amount": "50.00", "gst_rate": "18"},
        ]))
        .await;
    assert_eq!(imported.status, StatusCode::OK, "{}", imported.text);
    let tenant_wide = api
        .post("/v1/webhooks", &json!({"url": receiver.url}))
        .await;
    assert_eq!(
        tenant_wide.status,
        StatusCode::CREATED,
        "{}",
        tenant_wide.text
    );
    let tenant_wide_id = tenant_wide.json()["id"].as_str().unwrap().to_owned();

    let succeeded = api.submit("sleep", json!({"ms": 0})).await;
    let failed = api
        .submit(
            "sleep",
            json!({"ms": 0, "fail_times": 1, "permanent": true}),
        )
        .await;
    let mut finals = Vec::new();
    for (job, status) in [(&succeeded, "SUCCEEDED"), (&failed, "FAILED")] {
        let done = api.wait_final(&id_of(job)).await;
        assert_eq!(done["status"], status, "{done}");
        finals.push(done);
    }
    let cancelled = api.submit("sleep", json!({"ms": 60_000})).await;
    let reply = api
        .post(
            &format!("/v1/jobs/{}/cancel", id_of(&cancelled)),
            &json!({}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let done = api.wait_final(&id_of(&cancelled)).await;
    assert_eq!(done["status"], "CANCELLED", "{done}");
    finals.push(done);
    let final_ids: Vec<String> = finals.iter().map(id_of).collect();
    // Already final: its event is sent at once.
    let per_job = api
        .post(
            "/v1/webhooks",
            &json!({"url": receiver.url, "job_id": id_of(&succeeded)}),
        )
        .await;
    assert_eq!(per_job.status, StatusCode::CREATED, "{}", per_job.text);
    let per_job_id = per_job.json()["id"].as_str().unwrap().to_owned();

    let running = api.submit("sleep", json!({"ms": 600_000})).await;
    api.wait_status(&id_of(&running), "RUNNING").await;
    let queued = api.submit("sleep", json!({"ms": 1})).await;
    let running_hook = api
        .post(
            "/v1/webhooks",
            &json!({"url": receiver.url, "job_id": id_of(&running)}),
        )
        .await;
    assert_eq!(
        running_hook.status,
        StatusCode::CREATED,
        "{}",
        running_hook.text
    );
    let running_hook_id = running_hook.json()["id"].as_str().unwrap().to_owned();

    // Before the retention ends, everything is there: three events for the
    // tenant-wide webhook and one for the per-job one, each delivered and
    // logged.
    wait::until_ok(
        "four deliveries logged",
        Duration::from_secs(5),
        async || match traces(&env, &final_ids).await {
            [_, _, _, logged, _] if logged >= 4 => Ok(()),
            seen => Err(format!(
                "{seen:?}; the receiver saw {}",
                receiver.received()
            )),
        },
    )
    .await;
    assert_eq!(traces(&env, &final_ids).await, [3, 1, 4, 4, 1]);
    let oldest_finish = finals
        .iter()
        .map(|j| ms_of(&j["finished_at"]))
        .min()
        .unwrap();
    assert!(
        now_ms() < oldest_finish + RETENTION_SECS * 1000,
        "the set-up outlasted the retention; nothing was checked before it"
    );

    for job in &finals {
        let deadline = ms_of(&job["finished_at"]) + (RETENTION_SECS + 15) * 1000;
        let gone_at = wait_gone(&api, &id_of(job), deadline).await;
        assert!(
            gone_at >= ms_of(&job["finished_at"]) + RETENTION_SECS * 1000,
            "{} was deleted before its retention ended",
            id_of(job)
        );
    }
    for job_id in &final_ids {
        api.get(&format!("/v1/jobs/{job_id}"))
            .await
            .assert_problem(404);
        api.get(&format!("/v1/jobs/{job_id}/result"))
            .await
            .assert_problem(404);
    }
    assert_eq!(traces(&env, &final_ids).await, [0, 0, 0, 0, 0]);
    api.get(&format!("/v1/webhooks/{per_job_id}"))
        .await
        .assert_problem(404);

    // What is not final, and the tenant's own data, stays.
    assert_eq!(api.job(&id_of(&running)).await["status"], "RUNNING");
    assert_eq!(api.job(&id_of(&queued)).await["status"], "QUEUED");
    for webhook_id in [&tenant_wide_id, &running_hook_id] {
        let reply = api.get(&format!("/v1/webhooks/{webhook_id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    assert_eq!(
        env.count("SELECT COUNT(*) FROM ledger_entries WHERE tenant_id = 'tenant-a'")
            .await,
        2
    );
}

async fn a_replayed_submit_after_its_job_was_pruned_answers_as_before(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "true"), ("JOB_RETENTION", "1s")])
        .await;
    let submit = || {
        api.client
            .post(api.url("/v1/reports/sleep"))
            .bearer_auth(&api.key)
            .header("idempotency-key", "retention-replay")
            .json(&json!({"ms": 0}))
    };
    let first = Api::read(submit()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let job = first.json();
    let done = api.wait_final(&id_of(&job)).await;
    wait_gone(&api, &id_of(&job), ms_of(&done["finished_at"]) + 16_000).await;

    let replay = Api::read(submit()).await;
    assert_eq!(replay.status, StatusCode::ACCEPTED);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text, "the stored answer, byte for byte");
    for header in ["location", "retry-after", "content-type"] {
        assert_eq!(replay.header(header), first.header(header), "{header}");
    }
    // The answer names a job that is gone.
    api.get(first.header("location").expect("location"))
        .await
        .assert_problem(404);
    assert_eq!(
        env.count("SELECT COUNT(*) FROM jobs").await,
        0,
        "the replay made no job"
    );
}

const BACKLOG: i64 = 2_500;

async fn the_pruner_works_through_a_backlog_larger_than_a_batch(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    // Finished long ago (in 1970), as after an upgrade of a service that
    // never deleted anything; and one that finished now.
    let series = match backend {
        Backend::Sqlite => format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {BACKLOG})"
        ),
        Backend::PgRedis => String::new(),
    };
    let from = match backend {
        Backend::Sqlite => "FROM s".to_owned(),
        Backend::PgRedis => format!("FROM generate_series(1, {BACKLOG}) AS s(i)"),
    };
    let id = "'job_0000000000000000' || (1000000000000000 + i)";
    let now = moment_sql(backend, &now_ms().to_string());
    let old = moment_sql(backend, "i");
    // One transaction: the pruner must not delete a job before its result
    // is written.
    env.execute_sql(&format!(
        "BEGIN;
         {series} INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
             created_at, started_at, finished_at, run_after, cancel_requested)
         SELECT {id}, 'tenant-a', 'sleep', '{{}}', 'SUCCEEDED', 1, 5, {old}, {old}, {old},
                {old}, false {from};
         INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
             created_at, started_at, finished_at, run_after, cancel_requested)
         VALUES ('job_ffffffffffffffffffffffffffffffff', 'tenant-a', 'sleep', '{{}}', 'SUCCEEDED',
             1, 5, {now}, {now}, {now}, {now}, false);
         {series} INSERT INTO job_results (job_id, body) SELECT {id}, '{{}}' {from};
         COMMIT;"
    ))
    .await;

    // Generous: the pruner paces itself, and the whole suite shares the
    // machine meanwhile.
    wait::until_ok(
        &format!("the {BACKLOG} old jobs pruned"),
        Duration::from_secs(180),
        async || match env
            .count(&format!(
                "SELECT COUNT(*) FROM jobs WHERE finished_at < {}",
                moment_sql(backend, "1000000")
            ))
            .await
        {
            0 => Ok(()),
            left => Err(format!("{left} left")),
        },
    )
    .await;
    assert_eq!(env.count("SELECT COUNT(*) FROM job_results").await, 0);
    let recent = api.job("job_ffffffffffffffffffffffffffffffff").await;
    assert_eq!(recent["status"], "SUCCEEDED");
}

crate::on_both_backends!(
    finished_jobs_are_deleted_with_their_results_events_and_webhooks_after_the_retention,
    a_replayed_submit_after_its_job_was_pruned_answers_as_before,
    the_pruner_works_through_a_backlog_larger_than_a_batch,
);

// ----------------------------------------------------------------- queue

/// Submits `count` quick jobs with 16 clients and waits until all are final.
async fn run_jobs(env: &TestEnv, api: &Api, count: usize) {
    let before = env.count(SUCCEEDED).await;
    submit_jobs(api, count).await;
    wait_all_succeeded(env, before + count as i64).await;
}

const SUCCEEDED: &str = "SELECT COUNT(*) FROM jobs WHERE status = 'SUCCEEDED'";

/// Submits `count` quick jobs from 16 clients at once.
async fn submit_jobs(api: &Api, count: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients = (0..16).map(|_| {
        let next = next.clone();
        async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                api.submit("sleep", json!({"ms": 0})).await;
            }
        }
    });
    futures::future::join_all(clients).await;
}

/// Waits until no job is queued or running; then `succeeded` jobs have.
async fn wait_all_succeeded(env: &TestEnv, succeeded: i64) {
    wait::until_true("every job final", Duration::from_secs(120), async || {
        env.count("SELECT COUNT(*) FROM jobs WHERE status IN ('QUEUED', 'RUNNING')")
            .await
            == 0
    })
    .await;
    assert_eq!(env.count(SUCCEEDED).await, succeeded);
}

/// The keys under the test's queue prefix: how many, and their bytes.
async fn redis_footprint(prefix: &str) -> (usize, i64) {
    let client = redis::Client::open(crate::common::REDIS_URL).expect("redis");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis on 127.0.0.1:6379");
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut bytes = 0;
    for key in &keys {
        let size: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("MEMORY USAGE");
        bytes += size.unwrap_or(0);
    }
    (keys.len(), bytes)
}

const QUEUE_JOBS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_nothing_per_job_once_the_jobs_are_done() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let _worker = env.start_worker(&[]);
    // The baseline once the worker's consumer is registered.
    env.wait_for_redis_consumers(1).await;
    let (keys_before, bytes_before) = redis_footprint(&env.queue_name).await;

    // Back to the baseline after each round of jobs: the acknowledgements
    // come with later fetches, and the vacuum runs every few seconds.
    let back_to_baseline = async |round: usize| {
        wait::until_ok(
            &format!("the queue's keys back to the baseline after round {round}"),
            Duration::from_secs(30),
            async || {
                let (keys, bytes) = redis_footprint(&env.queue_name).await;
                if keys <= keys_before + 5 && bytes <= bytes_before + 16 * 1024 {
                    Ok((keys, bytes))
                } else {
                    Err(format!(
                        "{keys} keys ({bytes} bytes), against {keys_before} ({bytes_before} bytes)"
                    ))
                }
            },
        )
        .await
    };
    run_jobs(&env, &api, QUEUE_JOBS).await;
    let (keys, bytes) = back_to_baseline(1).await;
    // And it stays so: a second round leaves no more behind than the first.
    run_jobs(&env, &api, QUEUE_JOBS / 10).await;
    back_to_baseline(2).await;
    let (keys_later, bytes_later) = redis_footprint(&env.queue_name).await;
    assert!(
        keys_later <= keys + 2 && bytes_later <= bytes + 4 * 1024,
        "{keys_later} keys ({bytes_later} bytes), against {keys} ({bytes} bytes) after the first round"
    );
}

/// The rows the queue keeps where the job rows are the queue: the
/// claimable jobs, and any outbox row beside them.
async fn queue_rows(env: &TestEnv) -> i64 {
    env.count(
        "SELECT (SELECT COUNT(*) FROM jobs WHERE status = 'QUEUED' AND capped IS NULL)
                + (SELECT COUNT(*) FROM outbox)",
    )
    .await
}

const SQL_QUEUE_JOBS: usize = 300;

/// The job rows as the queue, on SQLite (separate worker processes) and on
/// Postgres without Redis: a row per job while it waits, nothing beside the
/// job once it has run.
async fn sql_queue_tables_keep_no_row_per_finished_job(backend: Backend) {
    let env = TestEnv::new(backend).await.without_redis();
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;

    // Published before any worker runs: the table holds a row per job.
    submit_jobs(&api, SQL_QUEUE_JOBS).await;
    wait::until_ok(
        &format!("a row per job in the queue's table, {SQL_QUEUE_JOBS} in all"),
        Duration::from_secs(30),
        async || match queue_rows(&env).await {
            rows if rows == SQL_QUEUE_JOBS as i64 => Ok(()),
            rows => Err(format!("{rows} rows")),
        },
    )
    .await;
    let _worker = env.start_worker(&[]);
    wait_all_succeeded(&env, SQL_QUEUE_JOBS as i64).await;

    wait::until_ok(
        &format!("the queue's table empty after {SQL_QUEUE_JOBS} finished jobs"),
        Duration::from_secs(30),
        async || match queue_rows(&env).await {
            0 => Ok(()),
            rows => Err(format!("{rows} rows")),
        },
    )
    .await;
}

mod sql_queue {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_job_rows_keep_no_row_per_finished_job() {
        super::sql_queue_tables_keep_no_row_per_finished_job(crate::common::Backend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn database_queue_keeps_no_row_per_finished_job() {
        super::sql_queue_tables_keep_no_row_per_finished_job(crate::common::Backend::PgRedis).await;
    }
}
