//! Secrets at rest, through the real binaries: no secret a client was
//! given is found in clear in the database's files or a dump of it; the
//! master keys are rotated under load with every delivery signed with
//! the secret its receiver holds; `api secrets rotate` stopped midway is
//! finished by the next run; and the start refuses missing or wrong keys
//! with a message naming `RECEIPT_MASTER_KEYS`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use reqwest::Method;
use serde_json::{Value, json};
use testkit::new_master_key;

use crate::common::{Announcements, Api, Backend, Finished, KEY_A, Process, TestEnv};

const SETTING: &str = "RECEIPT_MASTER_KEYS";

/// The master key the env's processes seal with: the setting on Postgres,
/// the key file beside the database on SQLite.
fn master_key_of(env: &TestEnv) -> String {
    match &env.master_keys {
        Some(keys) => keys.clone(),
        None => std::fs::read_to_string(key_file(env))
            .expect("the key file")
            .trim()
            .to_owned(),
    }
}

fn key_file(env: &TestEnv) -> std::path::PathBuf {
    env.dir().join("jobs.db.master-key")
}

fn secret_of(reply: &Value) -> String {
    reply["secret"].as_str().expect("a secret").to_owned()
}

/// A fresh Idempotency-Key: with one, the answer is also stored under it,
/// which must not keep the secret either.
fn idempotency_key() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("secrets-{n}")
}

/// Registers a webhook to nowhere in particular; its secret.
async fn register(api: &Api) -> (String, String) {
    let request = api
        .request(Method::POST, "/v1/webhooks")
        .header("idempotency-key", idempotency_key())
        .json(&json!({"url": "http://127.0.0.1:9/hook", "events": ["job.succeeded"]}));
    let reply = Api::read(request).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    let webhook = reply.json();
    (
        webhook["id"].as_str().expect("an id").to_owned(),
        secret_of(&webhook),
    )
}

async fn put_filing_endpoint(api: &Api) -> String {
    let reply = api
        .send(
            Method::PUT,
            "/v1/filing-endpoint",
            Some(&json!({"url": "http://127.0.0.1:9/returns"})),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    secret_of(&reply.json())
}

/// Every secret the api handed out: two webhooks', one rotated, and the
/// filing endpoint's (the same at every PUT).
async fn secrets_handed_out(api: &Api) -> Vec<String> {
    let (_, first) = register(api).await;
    let (second_id, second) = register(api).await;
    let request = api
        .request(
            Method::POST,
            &format!("/v1/webhooks/{second_id}/rotate-secret"),
        )
        .header("idempotency-key", idempotency_key());
    let rotated = Api::read(request).await;
    assert_eq!(rotated.status.as_u16(), 200, "{}", rotated.text);
    let filing = put_filing_endpoint(api).await;
    assert_eq!(
        put_filing_endpoint(api).await,
        filing,
        "kept at a second PUT"
    );
    vec![first, second, secret_of(&rotated.json()), filing]
}

/// What the database holds, as bytes: the SQLite files (database, WAL and
/// shared memory), or a `pg_dump` of the Postgres database.
fn database_bytes(env: &TestEnv) -> Vec<(String, Vec<u8>)> {
    match env.backend {
        Backend::Sqlite => ["jobs.db", "jobs.db-wal", "jobs.db-shm"]
            .into_iter()
            .filter_map(|name| {
                std::fs::read(env.dir().join(name))
                    .ok()
                    .map(|bytes| (name.to_owned(), bytes))
            })
            .collect(),
        Backend::PgRedis => {
            let name = env.database_name().expect("a Postgres database");
            let dump = std::process::Command::new("pg_dump")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", name])
                .output()
                .expect("pg_dump");
            assert!(dump.status.success(), "pg_dump: {:?}", dump);
            vec![("pg_dump".to_owned(), dump.stdout)]
        }
    }
}

/// Where each secret is found in clear, as `(secret, file)`.
fn found_in_clear(env: &TestEnv, secrets: &[String]) -> Vec<(String, String)> {
    let files = database_bytes(env);
    assert!(!files.is_empty(), "nothing to search");
    let mut found = Vec::new();
    for secret in secrets {
        // The key alone too, without its `whsec_` prefix; and as a dump
        // writes a `bytea` (an answer stored under an Idempotency-Key is
        // one), in hex.
        let key = secret.trim_start_matches("whsec_");
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        for (name, bytes) in &files {
            let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
            if holds(key.as_bytes()) || holds(hex.as_bytes()) {
                found.push((secret.clone(), name.clone()));
            }
        }
    }
    found
}

async fn no_secret_a_client_was_given_is_stored_in_clear(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let mut api = env.start_embedded_with_local_receivers().await;
    let secrets = secrets_handed_out(&api).await;
    assert_eq!(found_in_clear(&env, &secrets), [], "while the api runs");
    let process = api.process.as_mut().expect("the api");
    assert!(process.terminate().expect("stopped").success());
    assert_eq!(found_in_clear(&env, &secrets), [], "once it stopped");
}

fn assert_refused(finished: &Finished, says: &str) {
    let printed = format!("{}{}", finished.stdout, finished.stderr);
    assert_eq!(finished.status.code(), Some(1), "{printed}");
    assert!(printed.contains(SETTING), "names the setting: {printed}");
    assert!(printed.contains(says), "says {says:?}: {printed}");
    assert!(!printed.contains("panicked"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_a_master_key_or_with_a_wrong_one_refuses_to_start() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let unset = [(SETTING, "")];
    assert_refused(&env.run_api(&["serve"], &unset), "is not set");
    assert_refused(&env.run_worker(&["run"], &unset), "is not set");
    for (key, says) in [
        ("not base64!", "is not base64"),
        ("c2hvcnQ=", "is 5 bytes, not 32"),
    ] {
        assert_refused(&env.run_api(&["serve"], &[(SETTING, key)]), says);
        assert_refused(&env.run_worker(&["run"], &[(SETTING, key)]), says);
    }
    // What needs no secret still runs without the key.
    for command in [&["migrate"][..], &["keys", "list"]] {
        let finished = env.run_api(command, &unset);
        assert!(finished.status.success(), "{command:?}: {finished:?}");
    }

    // A key that opens none of the stored data keys.
    let mut api = env.start_api(&[LOOPBACK]).await;
    register(&api).await;
    assert!(api.process.as_mut().expect("api").terminate().is_some());
    let other = [(SETTING, new_master_key())];
    let other: Vec<(&str, &str)> = other.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_refused(&env.run_api(&["serve"], &other), "does not hold");
    assert_refused(&env.run_worker(&["run"], &other), "does not hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_makes_a_key_file_of_mode_0600_once_and_reuses_it() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new(Backend::Sqlite).await;
    assert!(!key_file(&env).exists());
    let mut api = env.start_embedded_with_local_receivers().await;
    let process = api.process.as_ref().expect("the api");
    // Printed before it listened.
    let told = format!(
        "made a master key for secrets at rest in {}",
        key_file(&env).display()
    );
    assert_eq!(process.count_lines_containing(&told), 1, "{told}");
    assert_eq!(
        process.count_lines_containing(&format!("or set {SETTING} instead")),
        1
    );
    let mode = std::fs::metadata(key_file(&env))
        .expect("the key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let key = master_key_of(&env);
    let filing = put_filing_endpoint(&api).await;
    assert!(api.process.as_mut().expect("api").terminate().is_some());

    let again = env.start_embedded_with_local_receivers().await;
    assert_eq!(
        put_filing_endpoint(&again).await,
        filing,
        "opened with the same key"
    );
    assert_eq!(master_key_of(&env), key, "the file is kept");
    assert_eq!(
        again
            .process
            .as_ref()
            .expect("the api")
            .count_lines_containing("made a master key"),
        0
    );
}

async fn a_rotation_stopped_midway_is_finished_by_the_next_run(backend: Backend) {
    let mut env = TestEnv::new(backend).await;
    let mut api = env.start_embedded_with_local_receivers().await;
    register(&api).await;
    register(&api).await;
    register(&api).await;
    let filing = put_filing_endpoint(&api).await;
    assert!(api.process.as_mut().expect("api").terminate().is_some());

    let old = master_key_of(&env);
    let new = new_master_key();
    env.set(SETTING, &format!("{new},{old}"));
    let rotate = ["secrets", "rotate", "--batch-size", "1"];
    let stopped = env.run_api(
        &rotate,
        &[("FAILPOINTS", "store::secrets_batch_committed=1*return")],
    );
    assert!(!stopped.status.success(), "{stopped:?}");
    assert!(
        stopped.stderr.contains("store::secrets_batch_committed"),
        "{stopped:?}"
    );

    // Stopped after one batch: every secret still opens.
    let both = env.start_embedded_with_local_receivers().await;
    assert_eq!(put_filing_endpoint(&both).await, filing);
    let finished = env.run_api(&rotate, &[]);
    assert!(finished.status.success(), "{finished:?}");
    assert!(
        finished.stdout.contains("3 re-encrypted"),
        "the next run does the rest: {}",
        finished.stdout
    );
    assert!(
        finished.stdout.contains("Retired 1 data keys"),
        "{}",
        finished.stdout
    );
    let again = env.run_api(&rotate, &[]);
    assert!(again.status.success(), "{again:?}");
    assert!(
        again.stdout.starts_with("Nothing to do"),
        "{}",
        again.stdout
    );
    drop(both);

    // The old key can go.
    env.set(SETTING, &new);
    let new_only = env.start_embedded_with_local_receivers().await;
    assert_eq!(put_filing_endpoint(&new_only).await, filing);

    // Each committed batch left its entry in the audit log, and so did the
    // data key retired: the deployment's, in every tenant's log.
    for tenant in [new_only.with_key(KEY_A), new_only.as_tenant_b()] {
        let log = tenant.get("/v1/audit?action=secrets.rotated").await.json();
        let entries = log["data"].as_array().expect("entries");
        assert_eq!(
            entries.len(),
            5,
            "1 + 3 batches and 1 retirement: {entries:?}"
        );
        for entry in entries {
            assert_eq!(entry["actor"], "command", "{entry}");
            assert_eq!(entry["request_id"], "api secrets rotate", "{entry}");
            assert_eq!(entry["deployment_wide"], true, "{entry}");
        }
        assert_eq!(entries[0]["details"]["data_keys_retired"], 1);
    }
}

crate::on_both_backends!(
    no_secret_a_client_was_given_is_stored_in_clear,
    a_rotation_stopped_midway_is_finished_by_the_next_run,
);

/// `sleep` jobs submitted one after another until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    /// How many jobs it has submitted so far.
    submitted: Arc<AtomicUsize>,
    submitting: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    fn on(api: &Api) -> Load {
        let api = api.with_key(KEY_A);
        let stop = Arc::new(AtomicBool::new(false));
        let submitted = Arc::new(AtomicUsize::new(0));
        let (stopped, counted) = (stop.clone(), submitted.clone());
        let submitting = tokio::spawn(async move {
            let mut ids = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let job = api.submit("sleep", json!({"ms": 20})).await;
                ids.push(job["job_id"].as_str().expect("an id").to_owned());
                counted.fetch_add(1, Ordering::Relaxed);
            }
            ids
        });
        Load {
            stop,
            submitted,
            submitting,
        }
    }

    /// Waits until it has submitted `count` jobs.
    async fn until_submitted(&self, count: usize) {
        testkit::wait::until_true("the load's submits", Duration::from_secs(30), async || {
            self.submitted.load(Ordering::Relaxed) >= count
        })
        .await;
    }

    /// Stops it; the jobs it submitted.
    async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.submitting.await.expect("the submits")
    }
}

const LOOPBACK: (&str, &str) = ("WEBHOOK_ALLOW_PRIVATE", "true");

/// The api and a worker of the production shape, with the env's settings.
async fn processes(env: &TestEnv) -> (Api, Process) {
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), LOOPBACK])
        .await;
    let worker = env.start_worker(&[LOOPBACK]);
    (api, worker)
}

/// A rolling restart with the env's settings: new processes start beside
/// the running ones, the load moves to the new api, then the old ones stop.
async fn restart(
    env: &TestEnv,
    running: (Api, Process),
    load: Load,
    jobs: &mut Vec<String>,
) -> ((Api, Process), Load) {
    let next = processes(env).await;
    jobs.extend(load.stop().await);
    let (mut api, mut worker) = running;
    assert!(worker.terminate().expect("the worker stopped").success());
    let process = api.process.as_mut().expect("the api");
    assert!(process.terminate().expect("the api stopped").success());
    let load = Load::on(&next.0);
    (next, load)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn master_keys_rotated_under_load_leave_every_delivery_signed_with_the_receivers_secret() {
    let mut env = TestEnv::new(Backend::PgRedis).await;
    let old = master_key_of(&env);
    let receiver = Announcements::start();
    let running = processes(&env).await;
    for _ in 0..3 {
        receiver.verify_with(&secret_of(&receiver.subscribe(&running.0).await));
    }
    let load = Load::on(&running.0);
    let mut jobs = Vec::new();

    // The new key first everywhere, the old one still listed; the secrets
    // are sealed anew while jobs run and their deliveries go out.
    let new = new_master_key();
    env.set(SETTING, &format!("{new},{old}"));
    let (running, load) = restart(&env, running, load, &mut jobs).await;
    let rotated = tokio::task::block_in_place(|| {
        env.run_api(&["secrets", "rotate", "--batch-size", "1"], &[])
    });
    assert!(rotated.status.success(), "{rotated:?}");
    assert!(
        rotated.stdout.contains("3 re-encrypted"),
        "{}",
        rotated.stdout
    );

    // Then the old key goes.
    env.set(SETTING, &new);
    let (_running, load) = restart(&env, running, load, &mut jobs).await;
    let before = jobs.len();
    // Jobs submitted with only the new key known.
    load.until_submitted(3).await;
    jobs.extend(load.stop().await);
    assert!(jobs.len() > before, "jobs ran after the old key went");
    for job_id in &jobs {
        receiver
            .wait_for_job(job_id, 3, Duration::from_secs(60))
            .await;
    }
    assert_eq!(
        receiver.unverified(),
        0,
        "deliveries whose signature failed"
    );
}
