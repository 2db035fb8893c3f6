//! A Postgres database made by the migrations of the release before
//! Postgres's own types, holding that release's rows (times in
//! milliseconds, flags as 0/1, JSON as text, a webhook's events joined by
//! commas), upgraded by the binaries: its jobs, keys, webhooks, stored
//! idempotency answers and ledger still work through the API.

use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, migrate::Migrator};

use crate::common::{Api, Backend, KEY_A, TestEnv};

/// The last migration of the release before Postgres's own types.
const LAST_OLD_MIGRATION: i64 = 20261203000040;

async fn migrate_as_the_release_before(url: &str) {
    migrate_up_to(url, LAST_OLD_MIGRATION).await;
}

/// Runs the migrations up to and including `last`, as a release that
/// ended there did.
async fn migrate_up_to(url: &str, last: i64) {
    let mut migrator = Migrator::new(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../migrations/postgres"
    )))
    .await
    .expect("the migrations");
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= last)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    migrator.dangerous_set_table_name("receipt_migrations");
    let mut conn = PgConnection::connect(url).await.expect("connect");
    migrator.run(&mut conn).await.expect("the old migrations");
    conn.close().await.expect("close");
}

fn job_id(job: &Value) -> &str {
    job["job_id"].as_str().expect("a job object")
}

/// The Idempotency-Key fingerprint of a submit as the release before
/// computed it, from the body as sent; the api now reads the decoded
/// parameters, which must come to the same.
fn fingerprint_of(path: &str, body: &[u8]) -> String {
    let request = actix_web::test::TestRequest::post()
        .uri(path)
        .to_http_request();
    api::idempotency::fingerprint(&request, api::idempotency::RequestBody::Sent(body))
}

#[tokio::test]
async fn a_database_of_the_release_before_keeps_working_after_the_upgrade() {
    let env = TestEnv::new(Backend::PgRedis).await;
    migrate_as_the_release_before(&env.database_url).await;
    let replayed_body = br#"{"job_id":"job_019a0000000070008000000000000003","status":"QUEUED"}"#;
    let submit_body = br#"{"ms": 1}"#;
    let fingerprint = fingerprint_of("/v1/reports/sleep", submit_body);
    // An hour ago, in the milliseconds the old schema kept: recent enough
    // that retention leaves the finished jobs alone.
    let created_ms = shared::time::now_ms() / 1000 * 1000 - 3_600_000;
    let later = created_ms + 60_000;
    let far = created_ms + 10 * 365 * 86_400_000;
    env.execute_sql(&format!(
        "INSERT INTO api_keys (key_hash, tenant_id, created_at, key_id, key_prefix)
             VALUES ('{key_hash}', 'tenant-a', {created_ms}, 'key_0123456789abcdef', 'rk_x');
         INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
                           progress, created_at, started_at, finished_at, run_after,
                           cancel_requested)
             VALUES ('job_019a0000000070008000000000000001', 'tenant-a', 'sleep', '{{\"ms\":1}}', 'SUCCEEDED', 1, 5,
                     1.0, {created_ms}, {created_ms}, {later}, {created_ms}, 0),
                    ('job_019a0000000070008000000000000002', 'tenant-a', 'sleep', '{{\"ms\":2}}', 'FAILED', 5, 5,
                     NULL, {created_ms}, {created_ms}, {later}, {created_ms}, 0),
                    ('job_019a0000000070008000000000000003', 'tenant-a', 'sleep', '{{\"ms\":1}}', 'QUEUED', 0, 5,
                     NULL, {created_ms}, NULL, NULL, {created_ms}, 0);
         UPDATE jobs SET error_type = 'broken', error_message = 'it broke'
             WHERE job_id = 'job_019a0000000070008000000000000002';
         INSERT INTO job_results (job_id, body) VALUES ('job_019a0000000070008000000000000001', '{{\"slept_ms\":1}}');
         INSERT INTO outbox (job_id, publish_at) VALUES ('job_019a0000000070008000000000000003', {created_ms});
         INSERT INTO webhooks (webhook_id, tenant_id, url, events, job_id, enabled, secret,
                               created_at)
             VALUES ('wh_019a0000000070008000000000000004', 'tenant-a', 'https://receiver.example/hook',
                     ',job.succeeded,job.failed,', NULL, 1, 'whsec_b2xkLXNlY3JldA==',
                     {created_ms});
         INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at,
                                       expires_at, response_status, response_headers,
                                       response_body)
             VALUES ('tenant-a', 'old-key', '{fingerprint}', {created_ms}, {far}, 202,
                     '[[\"location\",\"/v1/jobs/job_019a0000000070008000000000000003\"],[\"content-type\",\"application/json\"]]',
                     '\\x{body_hex}');
         INSERT INTO ledger_entries (tenant_id, entry_id, entry_date, direction, amount_paise,
                                     rate_centi, interstate, party, description, created_at)
             VALUES ('tenant-a', 'inv-1', '2026-10-03', 'sale', 129900, 1800, 0, 'Acme',
                     'shirts', {created_ms}),
                    ('tenant-a', 'inv-lenient', '2026- 1-25', 'sale', 100, 1800, 1, '', '',
                     {created_ms});",
        key_hash = store::hash_key(KEY_A),
        body_hex = hex::encode(replayed_body),
    ))
    .await;

    // The new binaries migrate at start.
    let api = env.start_api(&[]).await;
    let _worker = env.start_worker(&[]);

    let done = api.job("job_019a0000000070008000000000000001").await;
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["created_at"], shared::time::to_rfc3339(created_ms));
    assert_eq!(done["finished_at"], shared::time::to_rfc3339(later));
    assert_eq!(done["params"], json!({"ms": 1}));
    let result = api
        .get("/v1/jobs/job_019a0000000070008000000000000001/result")
        .await;
    assert_eq!(result.status, 200, "{}", result.text);
    assert_eq!(result.json(), json!({"slept_ms": 1}));

    let failed = api.job("job_019a0000000070008000000000000002").await;
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(
        failed["error"],
        json!({"type": "broken", "message": "it broke"})
    );

    // A job queued before the upgrade runs after it.
    let queued = api.wait_final("job_019a0000000070008000000000000003").await;
    assert_eq!(queued["status"], "SUCCEEDED");

    let webhooks = api.get("/v1/webhooks").await.json();
    let webhook = &webhooks["data"][0];
    assert_eq!(webhook["id"], "wh_019a0000000070008000000000000004");
    assert_eq!(webhook["events"], json!(["job.succeeded", "job.failed"]));
    assert_eq!(webhook["enabled"], true);

    // The stored answer is replayed byte for byte.
    let replay = Api::read(
        api.client
            .request(Method::POST, api.url("/v1/reports/sleep"))
            .bearer_auth(&api.key)
            .header("idempotency-key", "old-key")
            .header("content-type", "application/json")
            .body(submit_body.to_vec()),
    )
    .await;
    assert_eq!(replay.status, 202);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replay.header("location"),
        Some("/v1/jobs/job_019a0000000070008000000000000003")
    );
    assert_eq!(replay.text.as_bytes(), replayed_body);

    // A new submit works beside the old rows.
    let fresh = api.submit("sleep", json!({"ms": 1})).await;
    assert_eq!(api.wait_final(job_id(&fresh)).await["status"], "SUCCEEDED");

    // The ledger's readable entry is in its month; the lenient one moved
    // aside, unchanged.
    let export = api
        .post(
            "/v1/reports/ledger-export",
            &json!({"from": "2026-10-01", "to": "2026-10-31"}),
        )
        .await
        .json();
    let exported = api.wait_final(job_id(&export)).await;
    assert_eq!(exported["status"], "SUCCEEDED");
    let rows: Value = api
        .get(&format!("/v1/jobs/{}/result", job_id(&export)))
        .await
        .json();
    assert_eq!(rows["entries"].as_array().map(Vec::len), Some(1), "{rows}");
    assert_eq!(
        env.count("SELECT COUNT(*) FROM ledger_entries_unreadable WHERE entry_date = '2026- 1-25'")
            .await,
        1
    );
}

/// Messages that apalis's Postgres storage held when a version that queued
/// there (Postgres without Redis) stopped: nothing reads that table now.
/// Their jobs run once from their rows, and the vacuum deletes what the
/// table kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_whose_messages_apalis_held_run_after_the_upgrade() {
    let env = TestEnv::new(Backend::PgRedis).await.without_redis();
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("REPUBLISH_AFTER", "5m")])
        .await;
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job_id(&job).to_owned();
    // As the earlier version left it: the message in apalis's table.
    let queue = format!("{}:jobs", env.queue_name);
    env.execute_sql(&format!(
        "CREATE SCHEMA apalis;
         CREATE TABLE apalis.jobs (id TEXT PRIMARY KEY, job_type TEXT NOT NULL, status TEXT NOT NULL);
         INSERT INTO apalis.jobs VALUES ('m1', '{queue}', 'Pending'), ('m0', '{queue}', 'Done');"
    ))
    .await;

    let _worker = env.start_worker(&[("REPUBLISH_AFTER", "5m")]);
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    crate::common::wait::until_true(
        "apalis's leftover rows deleted",
        std::time::Duration::from_secs(30),
        async || env.count("SELECT COUNT(*) FROM apalis.jobs").await == 0,
    )
    .await;
}

/// The last migration of the release whose Postgres shape without Redis
/// kept its messages in `queue_messages`.
const LAST_DATABASE_QUEUE_MIGRATION: i64 = 20261205000170;

/// A database of the release before the job row became the queue, as its
/// processes left it: a queued job whose message waits in
/// `queue_messages`, a job running under a worker that died (its message
/// in flight under a consumer whose heartbeat lapsed, its lease lapsed),
/// and a delayed job with its outbox row. The new binaries migrate it, and
/// every job runs once more than it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_and_running_jobs_of_the_database_queue_run_after_the_upgrade() {
    let env = TestEnv::new(Backend::PgRedis).await.without_redis();
    migrate_up_to(&env.database_url, LAST_DATABASE_QUEUE_MIGRATION).await;
    let queue = format!("{}:jobs", env.queue_name);
    let now_ms = shared::time::now_ms();
    let (created, lapsed, soon) = (now_ms - 60_000, now_ms - 10_000, now_ms + 2_000);
    let at = |ms: i64| format!("to_timestamp({ms}::float8 / 1000)");
    env.execute_sql(&format!(
        "INSERT INTO api_keys (key_hash, tenant_id, created_at, key_id, key_prefix)
             VALUES ('{key_hash}', 'tenant-a', {created_at}, 'key_0123456789abcdef', 'rk_x');
         INSERT INTO jobs (job_id, tenant_id, kind, params, status, attempts, max_attempts,
                           created_at, run_after, rank_at, started_at, lease_expires_at,
                           worker_id)
             VALUES ('job_019a0000000070008000000000000011', 'tenant-a', 'sleep', '{{\"ms\":1}}', 'QUEUED', 0, 5,
                     {created_at}, {created_at}, {created_at}, NULL, NULL, NULL),
                    ('job_019a0000000070008000000000000012', 'tenant-a', 'sleep', '{{\"ms\":1}}', 'RUNNING', 1, 5,
                     {created_at}, {created_at}, {created_at}, {created_at}, {lapsed_at},
                     'worker-gone'),
                    ('job_019a0000000070008000000000000013', 'tenant-a', 'sleep', '{{\"ms\":1}}', 'QUEUED', 0, 5,
                     {created_at}, {soon_at}, {soon_at}, NULL, NULL, NULL);
         INSERT INTO queue_messages (job_id, queue, tenant_id, rank_at, consumer, fetched_at)
             VALUES ('job_019a0000000070008000000000000011', '{queue}', 'tenant-a', {created_at}, NULL, NULL),
                    ('job_019a0000000070008000000000000012', '{queue}', 'tenant-a', {created_at}, 'worker-gone-g0',
                     {created_at});
         INSERT INTO queue_consumers (queue, consumer, alive_until)
             VALUES ('{queue}', 'worker-gone-g0', {lapsed_at});
         INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
             VALUES ('job_019a0000000070008000000000000013', {soon_at}, 0, {soon_at});",
        key_hash = store::hash_key(KEY_A),
        created_at = at(created),
        lapsed_at = at(lapsed),
        soon_at = at(soon),
    ))
    .await;

    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let _worker = env.start_worker(&[]);
    for (job_id, attempts) in [
        ("job_019a0000000070008000000000000011", 1),
        ("job_019a0000000070008000000000000012", 2),
        ("job_019a0000000070008000000000000013", 1),
    ] {
        let done = api.wait_final(job_id).await;
        assert_eq!(done["status"], "SUCCEEDED", "{job_id}: {done}");
        assert_eq!(done["attempts"], attempts, "{job_id}: {done}");
    }
    assert_eq!(
        env.count(
            "SELECT COUNT(*) FROM pg_tables
             WHERE tablename IN ('queue_messages', 'queue_consumers')"
        )
        .await,
        0,
        "the database queue's tables are gone"
    );
}
