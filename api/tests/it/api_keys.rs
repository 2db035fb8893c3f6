//! API keys have a lifecycle: `API_KEYS` is the complete list at each
//! start, keys are created, listed and revoked with `api keys`, a
//! revocation reaches every running api within seconds, and a bad key
//! costs no database query.

use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, Row};

use crate::common::{Api, Backend, Finished, KEY_A, PG_ADMIN_URL, TestEnv, wait};

const KEY_ONE: &str = "key-one-long-enough";
const KEY_TWO: &str = "key-two-long-enough";

/// How long a revocation may take to reach a running api.
const REVOCATION_BOUND: Duration = Duration::from_secs(5);

fn assert_refused(reply: &crate::common::Reply, context: &str) {
    let problem = reply.assert_problem(401);
    assert_eq!(problem["type"], "/problems/unauthorized", "{context}");
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer"),
        "{context}"
    );
}

/// Waits until the key gets `status` from the api; returns how long that
/// took, or panics after `bound`.
async fn wait_for_status(api: &Api, status: StatusCode, bound: Duration) -> Duration {
    let started = Instant::now();
    let reply = wait::until_ok(&format!("the key answered {status}"), bound, async || {
        let reply = api.get("/v1/jobs").await;
        if reply.status == status {
            Ok(reply)
        } else {
            Err(reply.status)
        }
    })
    .await;
    if status == StatusCode::UNAUTHORIZED {
        assert_refused(&reply, "a revoked key");
    }
    started.elapsed()
}

/// Waits until no connection to the database is left.
async fn wait_for_no_connection(admin: &mut PgConnection, database: &str) {
    wait::until_true(
        &format!("no connection to {database} left"),
        Duration::from_secs(30),
        async || {
            sqlx::query("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1")
                .bind(database)
                .fetch_one(&mut *admin)
                .await
                .expect("pg_stat_activity")
                .get::<i64, _>("n")
                == 0
        },
    )
    .await;
}

fn assert_success(run: &Finished, what: &str) {
    assert!(
        run.status.success(),
        "{what} failed: {:?}\nstdout: {}\nstderr: {}",
        run.status,
        run.stdout,
        run.stderr
    );
}

fn assert_failure(run: &Finished, what: &str) {
    assert!(
        !run.status.success(),
        "{what} should have failed\nstdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
    assert!(!run.stderr.trim().is_empty(), "{what} failed silently");
}

/// `api keys create` (or `create-key`): the key and its id.
fn create_key(env: &TestEnv, args: &[&str]) -> (String, String) {
    let run = env.run_api(args, &[]);
    assert_success(&run, "creating a key");
    let key = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("API key: "))
        .unwrap_or_else(|| panic!("no `API key:` line in {}", run.stdout))
        .to_owned();
    assert!(key.starts_with("rk_") && key.len() == 67, "{key}");
    let key_id = run
        .stdout
        .split_whitespace()
        .find(|word| word.starts_with("key_"))
        .unwrap_or_else(|| panic!("no key id in {}", run.stdout))
        .to_owned();
    (key, key_id)
}

/// `api keys list`, as its rows: key id -> the row's columns.
fn list_keys(env: &TestEnv) -> (String, Vec<Vec<String>>) {
    let run = env.run_api(&["keys", "list"], &[]);
    assert_success(&run, "listing keys");
    let rows = run
        .stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect();
    (run.stdout, rows)
}

fn row_of<'a>(rows: &'a [Vec<String>], key_id: &str) -> &'a [String] {
    rows.iter()
        .find(|row| row[0] == key_id)
        .unwrap_or_else(|| panic!("{key_id} not listed"))
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn a_key_rotated_through_api_keys_stops_working_at_the_next_start(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let mut api = env
        .start_api(&[("API_KEYS", &format!("tenant-a:{KEY_ONE}"))])
        .await;
    assert_eq!(api.with_key(KEY_ONE).get("/v1/jobs").await.status, 200);
    api.process.as_mut().unwrap().terminate();
    // Keys with scopes are not API_KEYS' to manage: a start keeps them.
    let (reader, _) = create_key(
        &env,
        &["keys", "create", "--tenant", "tenant-a", "--scope", "read"],
    );

    let api = env
        .start_api(&[("API_KEYS", &format!("tenant-a:{KEY_TWO}"))])
        .await;
    assert_refused(&api.with_key(KEY_ONE).get("/v1/jobs").await, "the old key");
    assert_eq!(api.with_key(KEY_TWO).get("/v1/jobs").await.status, 200);
    assert_eq!(api.with_key(&reader).get("/v1/jobs").await.status, 200);

    let (listing, rows) = list_keys(&env);
    assert_eq!(rows.len(), 3, "{listing}");
    assert!(
        listing.contains("(not in API_KEYS)"),
        "the old key is listed as revoked: {listing}"
    );
}

async fn a_key_moved_to_another_tenant_sees_that_tenants_jobs_only(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let mut api = env.start_api(&[]).await;
    let job_a = api.submit("sleep", json!({"ms": 1})).await;
    let job_b = api.as_tenant_b().submit("sleep", json!({"ms": 1})).await;
    api.process.as_mut().unwrap().terminate();

    // KEY_A now belongs to tenant-b; KEY_B is no longer listed.
    let api = env
        .start_api(&[("API_KEYS", &format!("tenant-b:{KEY_A}"))])
        .await;
    let listed = api.get("/v1/jobs").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let ids: Vec<String> = listed.json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|job| job["job_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [job_b["job_id"].as_str().unwrap()]);
    let own = api
        .get(&format!("/v1/jobs/{}", job_b["job_id"].as_str().unwrap()))
        .await;
    assert_eq!(own.status, 200);
    let other = api
        .get(&format!("/v1/jobs/{}", job_a["job_id"].as_str().unwrap()))
        .await;
    other.assert_problem(404);
    assert_refused(&api.as_tenant_b().get("/v1/jobs").await, "an unlisted key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_key_refuses_to_start_and_names_its_tenant_but_not_the_key() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let short = "abcdefghijklmno"; // 15 characters
    let run = env.run_api(
        &[],
        &[(
            "API_KEYS",
            &format!("tenant-a:{KEY_A},short-tenant:{short}"),
        )],
    );
    assert_failure(&run, "a start with a short key");
    assert!(run.stderr.contains("short-tenant"), "{}", run.stderr);
    assert!(run.stderr.contains("16 characters"), "{}", run.stderr);
    for printed in [&run.stdout, &run.stderr] {
        assert!(!printed.contains(short), "the key was printed: {printed}");
        assert!(!printed.contains(KEY_A), "a key was printed: {printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_api_keys_entry_refuses_to_start_without_printing_it() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let entry = "secret-without-any-tenant-0123456789";
    let run = env.run_api(&[], &[("API_KEYS", &format!("tenant-a:{KEY_A},{entry}"))]);
    assert_failure(&run, "a start with a malformed entry");
    assert!(
        run.stderr.contains("API_KEYS entry 2 is not tenant:key"),
        "{}",
        run.stderr
    );
    for printed in [&run.stdout, &run.stderr] {
        assert!(!printed.contains(entry), "the entry was printed: {printed}");
    }
}

async fn keys_are_created_listed_and_revoked_through_the_subcommands(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let (key, key_id) = create_key(&env, &["keys", "create", "--tenant", "tenant-c"]);
    let (legacy_key, legacy_id) = create_key(&env, &["create-key", "--tenant", "tenant-d"]);

    let (listing, rows) = list_keys(&env);
    for secret in [&key, &legacy_key] {
        assert!(
            !listing.contains(secret.as_str()),
            "a key was listed: {listing}"
        );
        assert!(
            !listing.contains(&sha256_hex(secret)),
            "a key's hash was listed: {listing}"
        );
    }
    let row = row_of(&rows, &key_id);
    assert_eq!(row[1], "tenant-c");
    assert_eq!(row[2], "full", "scope: {listing}");
    assert_eq!(row[3], format!("{}…", &key[..7]));
    assert_eq!(row[5], "never", "last used: {listing}");
    assert_eq!(row[6], "-", "revoked: {listing}");
    assert_eq!(row_of(&rows, &legacy_id)[1], "tenant-d");

    // Without API_KEYS the api serves the stored keys.
    let mut api = env.start_api(&[("API_KEYS", "")]).await;
    let api_c = api.with_key(&key);
    assert_eq!(api_c.get("/v1/jobs").await.status, 200);
    assert_eq!(api.with_key(&legacy_key).get("/v1/jobs").await.status, 200);

    let revoked = env.run_api(&["keys", "revoke", &key_id], &[]);
    assert_success(&revoked, "revoking a key");
    assert!(revoked.stdout.contains(&key_id), "{}", revoked.stdout);
    wait_for_status(&api_c, StatusCode::UNAUTHORIZED, REVOCATION_BOUND).await;
    assert_eq!(api.with_key(&legacy_key).get("/v1/jobs").await.status, 200);

    let again = env.run_api(&["keys", "revoke", &key_id], &[]);
    assert_success(&again, "revoking a revoked key");
    assert!(again.stdout.contains("already revoked"), "{}", again.stdout);

    let unknown = env.run_api(&["keys", "revoke", "key_0000000000000000"], &[]);
    assert_failure(&unknown, "revoking an unknown key id");
    assert!(
        unknown
            .stderr
            .contains("no API key has the id \"key_0000000000000000\""),
        "{}",
        unknown.stderr
    );
    assert_failure(&env.run_api(&["keys", "revoke"], &[]), "revoking no key id");
    assert_failure(
        &env.run_api(&["keys", "create"], &[]),
        "creating without a tenant",
    );
    let bad_tenant = env.run_api(&["keys", "create", "--tenant", "a,b"], &[]);
    assert_failure(&bad_tenant, "creating for a tenant API_KEYS cannot name");
    assert!(
        bad_tenant.stderr.contains("\"a,b\""),
        "{}",
        bad_tenant.stderr
    );

    // The uses are written at the latest when the api stops.
    api.process.as_mut().unwrap().terminate();
    let (listing, rows) = list_keys(&env);
    assert_eq!(rows.len(), 2, "a bad command stored nothing: {listing}");
    let row = row_of(&rows, &key_id);
    assert_ne!(row[5], "never", "last used: {listing}");
    assert!(
        row[6..].join(" ").ends_with("(api keys revoke)"),
        "revoked: {listing}"
    );
    assert_eq!(row_of(&rows, &legacy_id)[6], "-", "{listing}");
    for secret in [&key, &legacy_key] {
        assert!(
            !listing.contains(secret.as_str()),
            "a key was listed: {listing}"
        );
    }

    // A key revoked by the command stays revoked: a start listing it fails.
    let run = env.run_api(&[], &[("API_KEYS", &format!("tenant-c:{key}"))]);
    assert_failure(&run, "a start listing a revoked key");
    assert!(run.stderr.contains(&key_id), "{}", run.stderr);
    assert!(!run.stderr.contains(&key), "{}", run.stderr);
}

/// On Postgres two api processes share the database; on SQLite one
/// embedded api (with its worker pool) runs beside the command.
async fn a_revoked_key_is_refused_by_every_running_api_within_5_s(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let apis = match backend {
        Backend::PgRedis => vec![env.start_api(&[]).await, env.start_api(&[]).await],
        Backend::Sqlite => vec![env.start_embedded().await],
    };

    // A key made while they run is taken up too.
    let (key, key_id) = create_key(&env, &["keys", "create", "--tenant", "tenant-a"]);
    for api in &apis {
        wait_for_status(&api.with_key(&key), StatusCode::OK, REVOCATION_BOUND).await;
    }

    let (_, rows) = list_keys(&env);
    let configured_b = rows
        .iter()
        .find(|row| row[1] == "tenant-b")
        .expect("tenant-b's key is stored")[0]
        .clone();
    for revoked_id in [&key_id, &configured_b] {
        let run = env.run_api(&["keys", "revoke", revoked_id], &[]);
        assert_success(&run, "revoking");
    }
    for api in &apis {
        let took = wait_for_status(
            &api.with_key(&key),
            StatusCode::UNAUTHORIZED,
            REVOCATION_BOUND,
        )
        .await;
        eprintln!("a revoked key was refused after {took:?}");
        wait_for_status(
            &api.as_tenant_b(),
            StatusCode::UNAUTHORIZED,
            REVOCATION_BOUND,
        )
        .await;
        assert_eq!(
            api.get("/v1/jobs").await.status,
            200,
            "other keys still work"
        );
    }
}

crate::on_both_backends!(
    a_key_rotated_through_api_keys_stops_working_at_the_next_start,
    a_key_moved_to_another_tenant_sees_that_tenants_jobs_only,
    keys_are_created_listed_and_revoked_through_the_subcommands,
    a_revoked_key_is_refused_by_every_running_api_within_5_s,
);

/// What Postgres counted for one database: transactions (every statement
/// outside an explicit transaction is one) and reads of `api_keys`.
#[derive(Debug, Clone, Copy)]
struct Counters {
    transactions: i64,
    api_key_scans: i64,
}

/// Waits until no connection to the database is left (a backend writes
/// its statistics when it exits), then reads the counters.
async fn counters_after_disconnect(env: &TestEnv) -> Counters {
    let database_url = env.database_url.as_str();
    let database = env.database_name().expect("a Postgres database");
    let mut admin = PgConnection::connect(PG_ADMIN_URL).await.expect("admin");
    wait_for_no_connection(&mut admin, database).await;
    let row = sqlx::query(
        "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1",
    )
    .bind(database)
    .fetch_one(&mut admin)
    .await
    .expect("pg_stat_database");
    let transactions = row.get::<i64, _>("n");
    let mut own = PgConnection::connect(database_url).await.expect("test db");
    let row = sqlx::query(
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS n
         FROM pg_stat_user_tables WHERE relname = 'api_keys'",
    )
    .fetch_one(&mut own)
    .await
    .expect("pg_stat_user_tables");
    let api_key_scans = row.get::<i64, _>("n");
    own.close().await.expect("close");
    // Wait for this reading connection to be gone too.
    wait_for_no_connection(&mut admin, database).await;
    Counters {
        transactions,
        api_key_scans,
    }
}

/// Sends `count` requests, each with a different wrong key, 16 at a time.
async fn flood_with_wrong_keys(api: &Api, count: usize) {
    let statuses: Vec<StatusCode> = futures::stream::iter(0..count)
        .map(|_| {
            let wrong = format!(
                "rk_{:032x}{:032x}",
                rand::random::<u128>(),
                rand::random::<u128>()
            );
            let request = api.client.get(api.url("/v1/jobs")).bearer_auth(wrong);
            async move { request.send().await.expect("request").status() }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::UNAUTHORIZED),
        "every wrong key is refused"
    );
}

/// The api runs twice on one Postgres database for the same time: once
/// flooded with wrong keys, once idle. Every wrong key that reached the
/// database would add a transaction (and a read of `api_keys`) to the
/// first run; the background work (relay, sweepers, key refresh) is in
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_wrong_keys_makes_no_database_queries() {
    const WRONG_KEYS: usize = 3_000;
    let env = TestEnv::new(Backend::PgRedis).await;
    assert_success(&env.run_api(&["migrate"], &[]), "migrating");
    let before = counters_after_disconnect(&env).await;

    let mut api = env.start_api(&[]).await;
    assert_eq!(api.get("/v1/jobs").await.status, 200);
    let started = Instant::now();
    flood_with_wrong_keys(&api, WRONG_KEYS).await;
    let flood_time = started.elapsed();
    api.process.as_mut().unwrap().terminate();
    let flooded = counters_after_disconnect(&env).await;

    let mut api = env.start_api(&[]).await;
    assert_eq!(api.get("/v1/jobs").await.status, 200);
    // The control run: as long as the flood took, with no request at all.
    tokio::time::sleep(flood_time).await;
    api.process.as_mut().unwrap().terminate();
    let idle = counters_after_disconnect(&env).await;

    let flood_transactions = flooded.transactions - before.transactions;
    let idle_transactions = idle.transactions - flooded.transactions;
    let flood_scans = flooded.api_key_scans - before.api_key_scans;
    let idle_scans = idle.api_key_scans - flooded.api_key_scans;
    eprintln!(
        "{WRONG_KEYS} wrong keys in {flood_time:?}: {flood_transactions} transactions and \
         {flood_scans} reads of api_keys; idle for as long: {idle_transactions} and {idle_scans}"
    );
    let allowance = (WRONG_KEYS / 10) as i64;
    assert!(
        flood_transactions - idle_transactions < allowance,
        "the flood cost {flood_transactions} transactions, idling {idle_transactions}"
    );
    assert!(
        flood_scans - idle_scans < allowance,
        "the flood read api_keys {flood_scans} times, idling {idle_scans}"
    );
}
