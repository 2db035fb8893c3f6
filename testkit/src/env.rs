//! A private world for one test (or one bench scenario): its own database
//! (a fresh SQLite file, or a fresh Postgres database) and its own Redis
//! key prefix, the settings its processes get, and the `api` and `worker`
//! binaries started on it on port 0. Everything it made is dropped when it
//! goes out of scope, even when the test panics.

use std::{path::PathBuf, sync::Arc, time::Duration};

use crate::{
    client::Api,
    process::{self, Finished, Process, Stderr, Survivor},
    servers::{PrivatePgBouncer, PrivatePostgres},
    tenants::{KEY_A, KEY_B},
};

/// The machine's Postgres, as `scripts/test` starts it.
pub const PG_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The machine's Redis, as `scripts/test` starts it.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// What every process of a test gets unless the test says otherwise: two
/// tenants, the diagnostic kinds, quick retries, leases and shutdowns, and
/// small pools (tests run side by side on one Postgres: pools of the
/// default size, each opened as far as a busy moment takes it, would
/// together reach its `max_connections`).
pub fn test_settings() -> Vec<(String, String)> {
    let keys = format!("tenant-a:{KEY_A},tenant-b:{KEY_B}");
    owned(&[
        ("API_KEYS", &keys),
        ("ENABLE_DIAGNOSTIC_KINDS", "true"),
        ("RETRY_BASE_DELAY", "50ms"),
        ("RETRY_MAX_DELAY", "200ms"),
        ("JOB_LEASE", "3s"),
        ("SHUTDOWN_GRACE", "2s"),
        ("WORKER_CONCURRENCY", "4"),
        ("DATABASE_POOL_SIZE", "4"),
        ("RUST_LOG", "warn"),
    ])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: a SQLite file.
    Sqlite,
    /// The production shape: Postgres and Redis.
    PgRedis,
}

/// A private database (and Redis prefix) for one test.
pub struct TestEnv {
    pub backend: Backend,
    pub database_url: String,
    pub queue_name: String,
    pub redis_url: String,
    /// Settings every process of this test gets on top of [`TestEnv::settings`].
    pub extra_env: Vec<(String, String)>,
    /// Postgres: the `RECEIPT_MASTER_KEYS` every process gets, a key of
    /// the test's own. SQLite: none, so the processes use the key file
    /// beside the database, as the embedded default does.
    pub master_keys: Option<String>,
    /// The defaults every process gets ([`test_settings`] unless replaced).
    settings: Vec<(String, String)>,
    /// Dropped at the end: a database on a server that outlives the test,
    /// as `(admin URL, name)`.
    drop_database: Option<(String, String)>,
    /// The Redis whose keys under `queue_name` are deleted at the end.
    drop_redis_keys: Option<String>,
    /// Postgres only: whether the processes are given `REDIS_URL` (see
    /// [`TestEnv::without_redis`]).
    redis: bool,
    /// Under [`through_pgbouncer`]: the processes' `DATABASE_URL` names
    /// this PgBouncer (transaction mode), `database_url` the Postgres behind
    /// it, which the test itself reads directly.
    pooler_url: Option<String>,
    _pooled: Option<Arc<PooledServers>>,
    /// Where each process's stderr goes, when not to the test's own.
    logs: Option<PathBuf>,
    started: std::sync::atomic::AtomicUsize,
    /// Every process started here: those still running when the
    /// environment drops are killed before its database and keys go, or
    /// one of them could write keys after the cleanup.
    spawned: std::sync::Mutex<Vec<Survivor>>,
    dir: tempfile::TempDir,
}

/// A Postgres of the test's own and PgBouncer in transaction mode in front
/// of it, for the tests run [`through_pgbouncer`].
pub struct PooledServers {
    pub postgres: PrivatePostgres,
    pub pgbouncer: PrivatePgBouncer,
}

tokio::task_local! {
    static POOLED: Arc<PooledServers>;
}

/// Runs `test` with every Postgres [`TestEnv`] it makes reached by its
/// processes through PgBouncer in transaction mode (4 server connections),
/// as `DATABASE_POOLER=transaction` with `DATABASE_DIRECT_URL`.
pub async fn through_pgbouncer<F: std::future::Future>(test: F) -> F::Output {
    let postgres = PrivatePostgres::start();
    let pgbouncer = PrivatePgBouncer::start(postgres.port, 4);
    let servers = Arc::new(PooledServers {
        postgres,
        pgbouncer,
    });
    POOLED.scope(servers, test).await
}

/// A new master key for `RECEIPT_MASTER_KEYS`: 32 random bytes, base64.
pub fn new_master_key() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>())
}

fn unique_name() -> String {
    format!("rt_{}", uuid::Uuid::now_v7().simple())
}

impl TestEnv {
    /// On the machine's servers (or, inside [`through_pgbouncer`], on its
    /// Postgres behind PgBouncer), with [`test_settings`].
    pub async fn new(backend: Backend) -> Self {
        let pooled = POOLED.try_with(|servers| servers.clone()).ok();
        if let (Backend::PgRedis, Some(servers)) = (backend, pooled) {
            let mut env = Self::on_servers(
                &servers.postgres.admin_url(),
                &servers.postgres.url(),
                REDIS_URL,
            )
            .await;
            env.pooler_url = Some(format!("{}/{}", servers.pgbouncer.url(), env.queue_name));
            env._pooled = Some(servers);
            // Its Redis is the shared one: its keys are deleted at the end.
            env.drop_redis_keys = Some(REDIS_URL.to_owned());
            return env;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let name = unique_name();
        let (database_url, drop_database, drop_redis_keys) = match backend {
            Backend::Sqlite => (
                format!("sqlite://{}/jobs.db", dir.path().display()),
                None,
                None,
            ),
            Backend::PgRedis => {
                admin_sql(PG_ADMIN_URL, &format!("CREATE DATABASE {name}")).await;
                (
                    // Plain, as on any loopback: TLS protects nothing here,
                    // and the bench compares against peers that connect
                    // plainly. TLS has tests of its own.
                    format!("postgres://postgres@127.0.0.1:5432/{name}?sslmode=disable"),
                    Some((PG_ADMIN_URL.to_owned(), name.clone())),
                    Some(REDIS_URL.to_owned()),
                )
            }
        };
        Self::made(backend, database_url, name, REDIS_URL, dir).with(drop_database, drop_redis_keys)
    }

    /// The production shape on a Postgres and a Redis of the caller's own
    /// (`servers.rs`), which it may crash and restart; they go away with
    /// it, so nothing is dropped at the end.
    pub async fn on_servers(postgres_admin_url: &str, postgres_url: &str, redis_url: &str) -> Self {
        let name = unique_name();
        admin_sql(postgres_admin_url, &format!("CREATE DATABASE {name}")).await;
        Self::made(
            Backend::PgRedis,
            format!("{postgres_url}/{name}"),
            name,
            redis_url,
            tempfile::tempdir().expect("temp dir"),
        )
    }

    fn made(
        backend: Backend,
        database_url: String,
        queue_name: String,
        redis_url: &str,
        dir: tempfile::TempDir,
    ) -> Self {
        TestEnv {
            backend,
            database_url,
            queue_name,
            redis_url: redis_url.to_owned(),
            extra_env: Vec::new(),
            master_keys: (backend == Backend::PgRedis).then(new_master_key),
            settings: test_settings(),
            drop_database: None,
            drop_redis_keys: None,
            redis: backend == Backend::PgRedis,
            pooler_url: None,
            _pooled: None,
            logs: None,
            started: Default::default(),
            spawned: Default::default(),
            dir,
        }
    }

    fn with(
        mut self,
        drop_database: Option<(String, String)>,
        drop_redis_keys: Option<String>,
    ) -> Self {
        self.drop_database = drop_database;
        self.drop_redis_keys = drop_redis_keys;
        self
    }

    /// Postgres without Redis: the job rows are the queue.
    pub fn without_redis(mut self) -> Self {
        self.redis = false;
        self
    }

    /// Whether the processes started from this environment use Redis.
    pub fn uses_redis(&self) -> bool {
        self.redis
    }

    /// A setting for every process started from now on (after the
    /// defaults; a process's own additions still win).
    pub fn set(&mut self, key: &str, value: &str) {
        self.extra_env.retain(|(k, _)| k != key);
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    /// Replaces [`test_settings`] (a bench or a soak sets its own).
    pub fn settings(mut self, settings: &[(&str, &str)]) -> Self {
        self.settings = owned(settings);
        self
    }

    /// Each process's stderr into `{binary}-{n}.log` in `dir`.
    pub fn log_to(mut self, dir: PathBuf) -> Self {
        self.logs = Some(dir);
        self
    }

    /// A directory of this environment's own, removed with it.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The Postgres database's name, if there is one.
    pub fn database_name(&self) -> Option<&str> {
        match self.backend {
            Backend::PgRedis => self
                .database_url
                .rsplit('/')
                .next()
                .and_then(|name| name.split('?').next()),
            Backend::Sqlite => None,
        }
    }

    /// The environment of a process of this test, before its own additions.
    pub fn base_env(&self) -> Vec<(String, String)> {
        let mut env = owned(&[
            ("BIND_ADDR", "127.0.0.1:0"),
            ("DATABASE_URL", &self.database_url),
            ("QUEUE_NAME", &self.queue_name),
        ]);
        env.extend(self.settings.iter().cloned());
        if let Some(keys) = &self.master_keys {
            env.push(("RECEIPT_MASTER_KEYS".into(), keys.clone()));
        }
        if self.redis {
            env.push(("REDIS_URL".into(), self.redis_url.clone()));
        }
        if let Some(pooler_url) = &self.pooler_url {
            env.retain(|(k, _)| k != "DATABASE_URL");
            env.extend(owned(&[
                ("DATABASE_URL", pooler_url),
                ("DATABASE_DIRECT_URL", &self.database_url),
                ("DATABASE_POOLER", "transaction"),
            ]));
        }
        env
    }

    fn env_with(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = self.base_env();
        let extra = self
            .extra_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra.iter().copied());
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push(((*k).to_owned(), (*v).to_owned()));
        }
        env
    }

    fn spawn(&self, binary: &str, extra: &[(&str, &str)]) -> Process {
        let path = process::binary(binary).unwrap_or_else(|e| panic!("{e}"));
        self.spawn_at(&path, binary, extra)
    }

    /// The binary at `path` (another build's `api` or `worker`, named
    /// `binary` in the logs) in this environment, with extra settings.
    pub fn spawn_at(
        &self,
        path: &std::path::Path,
        binary: &str,
        extra: &[(&str, &str)],
    ) -> Process {
        let stderr = match &self.logs {
            None => Stderr::Echo,
            Some(dir) => {
                let n = self
                    .started
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let log = dir.join(format!("{binary}-{n}.log"));
                Stderr::File(std::fs::File::create(&log).expect("a log file"))
            }
        };
        let process = Process::spawn(path, &self.env_with(extra), stderr);
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(process.survivor());
        process
    }

    /// The api with the worker pool in the same process.
    pub async fn start_embedded(&self) -> Api {
        self.start_api(&[("EMBEDDED_WORKER", "true")]).await
    }

    /// The embedded api, allowed to deliver to receivers on loopback (the
    /// tests' own).
    pub async fn start_embedded_with_local_receivers(&self) -> Api {
        self.start_api(&[
            ("EMBEDDED_WORKER", "true"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ])
        .await
    }

    /// The api alone, with extra settings, once it listens.
    pub async fn start_api(&self, extra: &[(&str, &str)]) -> Api {
        Api::once_listening(self.spawn_api(extra))
    }

    /// The api process, not waited for.
    pub fn spawn_api(&self, extra: &[(&str, &str)]) -> Process {
        self.spawn("api", extra)
    }

    /// Runs the `api` binary with these arguments (a subcommand, or a
    /// start expected to fail) to its exit, at most 60 s.
    pub fn run_api(&self, args: &[&str], extra: &[(&str, &str)]) -> Finished {
        self.run_to_exit("api", args, extra)
    }

    /// Runs the `worker` binary (a start expected to fail) to its exit, at
    /// most 60 s.
    pub fn run_worker(&self, args: &[&str], extra: &[(&str, &str)]) -> Finished {
        self.run_to_exit("worker", args, extra)
    }

    fn run_to_exit(&self, binary: &str, args: &[&str], extra: &[(&str, &str)]) -> Finished {
        let path = process::binary(binary).unwrap_or_else(|e| panic!("{e}"));
        process::run_to_exit(&path, args, &self.env_with(extra), Duration::from_secs(60))
    }

    pub fn start_worker(&self, extra: &[(&str, &str)]) -> Process {
        self.spawn("worker", extra)
    }

    /// [`TestEnv::start_worker`] with settings made at run time (a clock's
    /// `LD_PRELOAD`, a proxy's URL).
    pub fn start_worker_owned(&self, extra: &[(String, String)]) -> Process {
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.start_worker(&extra)
    }

    /// Runs raw SQL on the test's database (to break it on purpose).
    pub async fn execute_sql(&self, sql: &str) {
        execute_at(&self.database_url, sql).await;
    }

    /// One number read with SQL from the test's database (a `COUNT(*)`).
    pub async fn count(&self, sql: &str) -> i64 {
        count_at(&self.database_url, sql).await
    }

    /// A connection to this test's Redis.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis_at(&self.redis_url).await
    }

    /// Waits (up to 30 s) until `n` consumers of the Redis queue are alive
    /// (each worker pool's heartbeat key, `{QUEUE_NAME}:jobs:alive:*`): the
    /// workers are ready for messages.
    pub async fn wait_for_redis_consumers(&self, n: usize) {
        let pattern = format!("{}:jobs:alive:*", self.queue_name);
        let mut conn = self.redis().await;
        crate::wait::until_ok(
            &format!("{n} consumers of the queue alive"),
            Duration::from_secs(30),
            async || {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await
                    .expect("KEYS");
                if keys.len() >= n { Ok(()) } else { Err(keys) }
            },
        )
        .await;
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let spawned = std::mem::take(self.spawned.get_mut().unwrap_or_else(|e| e.into_inner()));
        for process in spawned {
            process.kill();
        }
        let database = self.drop_database.take();
        let redis = self.drop_redis_keys.take();
        if database.is_none() && redis.is_none() {
            return;
        }
        let prefix = self.queue_name.clone();
        // Drop runs outside any runtime's async context: clean up on a
        // thread of our own.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                if let Some((admin_url, db)) = database {
                    admin_sql(
                        &admin_url,
                        &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
                    )
                    .await;
                }
                if let Some(url) = redis {
                    delete_redis_prefix(&url, &prefix).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Runs raw SQL on the database at `url`.
pub async fn execute_at(url: &str, sql: &str) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(url)
        .await
        .expect("the test database");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pool.close().await;
}

/// One number read with SQL from the database at `url`.
pub async fn count_at(url: &str, sql: &str) -> i64 {
    use sqlx::Row;
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(url)
        .await
        .expect("the test database");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let n = row.try_get::<i64, _>(0).expect("a number");
    pool.close().await;
    n
}

/// A connection to the Redis at `url`.
pub async fn redis_at(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("redis");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("redis")
}

/// Runs SQL on a Postgres server through its admin URL (`CREATE DATABASE`).
pub async fn admin_sql(admin_url: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {admin_url} (see README: Tests): {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn delete_redis_prefix(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}
