//! The tests' glue over `testkit`, the one process harness (a database and
//! Redis prefix per test, the real binaries on port 0, an HTTP client,
//! receivers, waiting for events): what only these tests need, because it
//! names the workspace's own crates.
#![allow(dead_code)] // each suite uses its own part of the harness

pub use testkit::{
    Announcements, Api, Backend, Finished, KEY_A, KEY_B, PG_ADMIN_URL, Process, REDIS_URL, Record,
    Reply, TestEnv, headers_of, redis_at, serve_on_loopback, through_pgbouncer, wait,
};

/// The store of a test's database, for arranging what the API cannot and
/// asserting on what was written.
pub trait StoreOf {
    fn store(&self) -> impl std::future::Future<Output = store::Store>;
}

impl StoreOf for TestEnv {
    async fn store(&self) -> store::Store {
        let store = store::Store::connect(&self.database_url)
            .await
            .expect("store");
        match &self.master_keys {
            Some(keys) => store.with_keyring(store::Keyring::parse(keys).expect("the test's key")),
            None => store,
        }
    }
}

/// The embedded api with keys of the store only (no `API_KEYS`), and a
/// key of full rights for tenant-a: `(the api's process, the api with the
/// key, the key's id)`.
pub async fn with_store_keys(env: &TestEnv) -> (Api, Api, String) {
    let api = env
        .start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("API_KEYS", ""),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ])
        .await;
    let (keyed, key_id) = key_known_to(env, &api, "tenant-a", &store::KeyScope::full()).await;
    (api, keyed, key_id)
}

/// A key of `tenant` with `scope`, made in the store as `api keys create`
/// makes one, once the running api knows it: the api with that key, and
/// the key's id.
pub async fn key_known_to(
    env: &TestEnv,
    api: &Api,
    tenant: &str,
    scope: &store::KeyScope,
) -> (Api, String) {
    let store = env.store().await;
    let made = store
        .create_scoped_api_key(tenant, scope, &store::Actor::Command("test"))
        .await
        .expect("a key");
    store.close().await;
    let keyed = api.with_key(&made.key);
    wait::until_true(
        "the api knows the key",
        std::time::Duration::from_secs(10),
        async || keyed.get("/v1/key").await.status == reqwest::StatusCode::OK,
    )
    .await;
    (keyed, made.key_id)
}

/// Sends a request with this Idempotency-Key, and `body` as JSON when
/// given.
pub async fn send_with_key(
    api: &Api,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
    key: &str,
) -> Reply {
    let mut request = api.request(method, path).header("idempotency-key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Api::read(request).await
}

/// A binary of this workspace, built beside the test binary.
pub fn bin_path(name: &str) -> std::path::PathBuf {
    testkit::binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Declares one async test per backend from an `async fn(Backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await;
                }
            )*
        }
        mod pg_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::PgRedis).await;
                }
            )*
        }
    };
}

/// Declares one async test per scenario, an `async fn(Backend)`, run on
/// the production shape through PgBouncer in transaction mode (see
/// [`through_pgbouncer`]).
#[macro_export]
macro_rules! through_pgbouncer {
    ($($name:ident),* $(,)?) => {
        mod pgbouncer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::common::through_pgbouncer(
                        super::$name($crate::common::Backend::PgRedis),
                    )
                    .await;
                }
            )*
        }
    };
}

/// Runs one more job of `api`'s tenant to its end and returns its id. The
/// pool takes a tenant's messages in order, so every message queued before
/// this one has been taken by the time it finishes: a test that must see
/// that something did not happen waits for this, not for a while.
pub async fn run_a_later_job(api: &Api) -> String {
    let job = api.submit("sleep", serde_json::json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().expect("job_id").to_owned();
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "the later job: {done}");
    job_id
}

/// The attempts of `kind` a `/metrics` page counts, by outcome
/// (`receipt_job_attempts_total`): one per run of the kind's handler.
pub fn attempts_counted(metrics: &str, kind: &str) -> std::collections::BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("receipt_job_attempts_total{"))
        .filter_map(|line| {
            let (labels, value) = line.split_once("} ")?;
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
            };
            (label("kind")? == kind)
                .then(|| Some((label("outcome")?, value.trim().parse().ok()?)))?
        })
        .collect()
}

/// `RUST_LOG` under which a worker pool logs how each stale attempt ends
/// (on a `worker`'s stdout, an `api`'s stderr).
pub const RUNNER_INFO: (&str, &str) = ("RUST_LOG", "warn,worker::runner=info");

/// Waits until the pool in `process`, started with [`RUNNER_INFO`], has
/// logged the end of `n` stale attempts, each of which wrote nothing: it
/// saw its lease taken by a newer attempt, or the fence dropped its outcome.
pub async fn wait_for_stale_attempts(process: &Process, n: usize) {
    wait::until_true(
        &format!("{n} stale attempts ended"),
        std::time::Duration::from_secs(30),
        async || {
            process.count_lines_containing("attempt superseded; dropped")
                + process.count_lines_containing("stale attempt; its outcome was dropped")
                >= n
        },
    )
    .await;
}

/// Waits until `announced` has each job's final status, then until a later
/// job's has come too (the dispatcher has moved past them), and asserts
/// each job was announced exactly once, as `event_type`.
pub async fn assert_announced_once(
    announced: &testkit::Announcements,
    api: &Api,
    job_ids: &[&str],
    event_type: &str,
) {
    let within = std::time::Duration::from_secs(30);
    for job_id in job_ids {
        announced.wait_for_job(job_id, 1, within).await;
    }
    let later = run_a_later_job(api).await;
    announced.wait_for_job(&later, 1, within).await;
    for job_id in job_ids {
        let events: Vec<String> = announced
            .of_job(job_id)
            .into_iter()
            .map(|(event_type, _)| event_type)
            .collect();
        assert_eq!(events, [event_type], "{job_id}'s announcements");
    }
}

/// `RUST_LOG` under which a worker pool logs each delivery it drops
/// because its job is not claimable (a duplicate, or a job already done).
pub const RUNNER_DEBUG: (&str, &str) = ("RUST_LOG", "warn,worker::runner=debug");

/// Deliveries dropped so far by the pools in `processes` (started with
/// [`RUNNER_DEBUG`]) because their job was not claimable.
pub fn dropped_deliveries(processes: &[&Process]) -> usize {
    processes
        .iter()
        .map(|p| p.count_lines_containing("not claimable; dropped"))
        .sum()
}

/// Where a `worker` started with `METRICS_ADDR` serves `/metrics`.
pub fn metrics_url(worker: &Process) -> String {
    let line = worker.first_line("metrics on http://");
    format!("{}/metrics", line.trim().trim_start_matches("metrics on "))
}

/// Waits until a statement on the test's Postgres database waits for a
/// lock (one the test holds). Looked at from a connection of its own each
/// time: a transaction sees the activity as it was at its first look.
pub async fn wait_for_a_blocked_statement(env: &TestEnv) {
    wait::until_true(
        "a statement blocked on the test's lock",
        std::time::Duration::from_secs(20),
        async || {
            env.count(
                "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0",
            )
            .await
                > 0
        },
    )
    .await;
}

/// A date in a test's own SQL, from an expression giving its
/// `YYYY-MM-DD` text: a `date` on Postgres, the text on SQLite.
pub fn date_sql(backend: Backend, text: &str) -> String {
    match backend {
        Backend::PgRedis => format!("({text})::date"),
        Backend::Sqlite => text.to_owned(),
    }
}

/// A moment in a test's own SQL, from an expression in unix milliseconds:
/// a `timestamptz` on Postgres, the number on SQLite.
pub fn moment_sql(backend: Backend, millis: &str) -> String {
    match backend {
        Backend::PgRedis => format!("to_timestamp(({millis}) / 1000.0)"),
        Backend::Sqlite => millis.to_owned(),
    }
}

/// The three queue shapes every scheduling feature must work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueShape {
    /// SQLite, the worker pool inside the api, the job rows as the queue.
    Embedded,
    /// Postgres, a `worker` process, the Redis queue.
    Redis,
    /// Postgres, a `worker` process, the job rows as the queue (no Redis).
    PostgresQueue,
}

/// Receipt running in one [`QueueShape`]: its api and, unless embedded,
/// one worker process.
pub struct Running {
    pub env: TestEnv,
    pub api: Api,
    pub worker: Option<Process>,
}

impl QueueShape {
    /// Starts the api (and a worker) with `settings` on every process,
    /// once the worker's pool is up.
    pub async fn start(self, settings: &[(&str, &str)]) -> Running {
        let backend = match self {
            QueueShape::Embedded => Backend::Sqlite,
            QueueShape::Redis | QueueShape::PostgresQueue => Backend::PgRedis,
        };
        let mut env = TestEnv::new(backend).await;
        if self == QueueShape::PostgresQueue {
            env = env.without_redis();
        }
        env.extra_env = settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if self == QueueShape::Embedded {
            let api = env.start_embedded().await;
            return Running {
                env,
                api,
                worker: None,
            };
        }
        let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
        let worker = env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]);
        worker.wait_for_line("metrics on http://");
        Running {
            env,
            api,
            worker: Some(worker),
        }
    }
}

/// Declares one async test per [`QueueShape`] from an
/// `async fn(QueueShape)`.
#[macro_export]
macro_rules! on_every_queue_shape {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::QueueShape::Embedded).await;
                }
            )*
        }
        mod redis_queue {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::QueueShape::Redis).await;
                }
            )*
        }
        mod postgres_queue {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::QueueShape::PostgresQueue).await;
                }
            )*
        }
    };
}

/// Declares one async test per production queue (Redis, and the database
/// queue of Postgres without Redis) from an `async fn(TestEnv)`.
#[macro_export]
macro_rules! on_both_production_queues {
    ($($name:ident),* $(,)?) => {
        mod redis_queue {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let env = $crate::common::TestEnv::new($crate::common::Backend::PgRedis).await;
                    super::$name(env).await;
                }
            )*
        }
        mod database_queue {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let env = $crate::common::TestEnv::new($crate::common::Backend::PgRedis)
                        .await
                        .without_redis();
                    super::$name(env).await;
                }
            )*
        }
    };
}
