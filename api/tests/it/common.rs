//! The test harness: every test gets its own database (a fresh SQLite file
//! or a fresh Postgres database) and its own Redis key prefix, spawns the
//! real `api` (and `worker`) binaries on port 0, and talks HTTP to them.
//! Everything a test starts is stopped, and everything it made is dropped,
//! when its `TestEnv` and `Process`es go out of scope, even on a panic.
#![allow(dead_code)] // each suite uses its own part of the harness

use std::{
    io::{BufRead, BufReader, Read},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::{Value, json};

pub const PG_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

pub const KEY_A: &str = "test-key-tenant-a";
pub const KEY_B: &str = "test-key-tenant-b";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: SQLite file, queue in the database.
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
    /// Settings every process of this test gets on top of the defaults.
    pub extra_env: Vec<(String, String)>,
    pg_database: Option<String>,
    /// False on servers a test started for itself, which go away with it.
    shared_servers: bool,
    /// Postgres only: whether the processes are given `REDIS_URL` (see
    /// [`TestEnv::without_redis`]).
    redis: bool,
    /// Under [`through_pgbouncer`]: the processes' `DATABASE_URL` names
    /// this PgBouncer (transaction mode), `database_url` the Postgres behind
    /// it, which the test itself reads directly.
    pooler_url: Option<String>,
    _pooled: Option<std::sync::Arc<PooledServers>>,
    _dir: tempfile::TempDir,
}

/// A Postgres of the test's own and PgBouncer in transaction mode in front
/// of it, for the tests declared with `through_pgbouncer!`.
pub struct PooledServers {
    pub postgres: testkit::servers::PrivatePostgres,
    pub pgbouncer: testkit::servers::PrivatePgBouncer,
}

tokio::task_local! {
    static POOLED: std::sync::Arc<PooledServers>;
}

/// Runs `test` with every Postgres [`TestEnv`] it makes reached by its
/// processes through PgBouncer in transaction mode (4 server connections),
/// as `DATABASE_POOLER=transaction` with `DATABASE_DIRECT_URL`.
pub async fn through_pgbouncer<F: std::future::Future>(test: F) -> F::Output {
    let postgres = testkit::servers::PrivatePostgres::start();
    let pgbouncer = testkit::servers::PrivatePgBouncer::start(postgres.port, 4);
    let servers = std::sync::Arc::new(PooledServers {
        postgres,
        pgbouncer,
    });
    POOLED.scope(servers, test).await
}

fn unique_name() -> String {
    format!("rt_{}", uuid::Uuid::now_v7().simple())
}

impl TestEnv {
    pub async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let name = unique_name();
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
            env.shared_servers = true;
            return env;
        }
        let (database_url, pg_database) = match backend {
            Backend::Sqlite => (format!("sqlite://{}/jobs.db", dir.path().display()), None),
            Backend::PgRedis => {
                admin_sql(&format!("CREATE DATABASE {name}")).await;
                (
                    format!("postgres://postgres@127.0.0.1:5432/{name}"),
                    Some(name.clone()),
                )
            }
        };
        TestEnv {
            backend,
            database_url,
            queue_name: name,
            redis_url: REDIS_URL.to_owned(),
            extra_env: Vec::new(),
            pg_database,
            shared_servers: true,
            redis: backend == Backend::PgRedis,
            pooler_url: None,
            _pooled: None,
            _dir: dir,
        }
    }

    /// The production shape on a Postgres and a Redis of the test's own
    /// (see `servers.rs`), which it may crash and restart.
    pub async fn on_servers(postgres_admin_url: &str, postgres_url: &str, redis_url: &str) -> Self {
        use sqlx::Connection;
        let name = unique_name();
        let mut conn = sqlx::PgConnection::connect(postgres_admin_url)
            .await
            .expect("the test's own Postgres");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create database");
        TestEnv {
            backend: Backend::PgRedis,
            database_url: format!("{postgres_url}/{name}"),
            queue_name: name,
            redis_url: redis_url.to_owned(),
            extra_env: Vec::new(),
            pg_database: None,
            shared_servers: false,
            redis: true,
            pooler_url: None,
            _pooled: None,
            _dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// Postgres without Redis: the queue is apalis's Postgres storage.
    pub fn without_redis(mut self) -> Self {
        self.redis = false;
        self
    }

    /// The environment of a process of this test, before its own additions.
    pub fn base_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("BIND_ADDR", "127.0.0.1:0".into()),
            ("DATABASE_URL", self.database_url.clone()),
            ("QUEUE_NAME", self.queue_name.clone()),
            ("API_KEYS", format!("tenant-a:{KEY_A},tenant-b:{KEY_B}")),
            ("ENABLE_DIAGNOSTIC_KINDS", "true".into()),
            ("RETRY_BASE_DELAY", "50ms".into()),
            ("RETRY_MAX_DELAY", "200ms".into()),
            ("JOB_LEASE", "3s".into()),
            ("SHUTDOWN_GRACE", "2s".into()),
            ("WORKER_CONCURRENCY", "4".into()),
            ("RUST_LOG", "warn".into()),
        ];
        if self.redis {
            env.push(("REDIS_URL", self.redis_url.clone()));
        }
        if let Some(pooler_url) = &self.pooler_url {
            env.retain(|(k, _)| *k != "DATABASE_URL");
            env.push(("DATABASE_URL", pooler_url.clone()));
            env.push(("DATABASE_DIRECT_URL", self.database_url.clone()));
            env.push(("DATABASE_POOLER", "transaction".into()));
        }
        env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
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

    /// The api alone, with extra settings.
    pub async fn start_api(&self, extra: &[(&str, &str)]) -> Api {
        let process = Process::spawn(&bin_path("api"), &self.env_with(extra));
        let line = process.wait_for_line("listening on http://");
        let addr = line
            .trim()
            .trim_start_matches("listening on http://")
            .to_owned();
        Api {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            key: KEY_A.to_owned(),
            process: Some(process),
        }
    }

    /// Runs the `api` binary with these arguments (a subcommand, or a
    /// start expected to fail) to its exit, at most 60 s.
    pub fn run_api(&self, args: &[&str], extra: &[(&str, &str)]) -> Finished {
        let mut command = Command::new(bin_path("api"));
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in self.env_with(extra) {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn");
        let read_all = |mut pipe: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = read_all(Box::new(child.stdout.take().expect("stdout")));
        let stderr = read_all(Box::new(child.stderr.take().expect("stderr")));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("api {args:?} still running after 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Finished {
            status,
            stdout: stdout.join().expect("stdout reader"),
            stderr: stderr.join().expect("stderr reader"),
        }
    }

    pub fn start_worker(&self, extra: &[(&str, &str)]) -> Process {
        Process::spawn(&bin_path("worker"), &self.env_with(extra))
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

    /// Runs raw SQL on the test's database (to break it on purpose).
    pub async fn execute_sql(&self, sql: &str) {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&self.database_url)
            .await
            .expect("the test database");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&pool)
            .await
            .expect("test sql");
        pool.close().await;
    }

    /// One number read with SQL from the test's database (a `COUNT(*)`).
    pub async fn count(&self, sql: &str) -> i64 {
        count_at(&self.database_url, sql).await
    }

    /// The store, for assertions on what was written.
    /// A connection to this test's Redis.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis_at(&self.redis_url).await
    }

    pub async fn store(&self) -> store::Store {
        let url = match self.backend {
            Backend::Sqlite => self.database_url.clone(),
            Backend::PgRedis => self.database_url.clone(),
        };
        store::Store::connect(&url).await.expect("store")
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let pg_database = self.pg_database.take();
        let prefix = self.queue_name.clone();
        let backend = self.backend;
        if !self.shared_servers {
            return;
        }
        // Drop runs outside any runtime's async context: clean up on a
        // thread of our own.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                if let Some(db) = pg_database {
                    admin_sql(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await;
                }
                if backend == Backend::PgRedis {
                    delete_redis_prefix(&prefix).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// One number read with SQL from the database at `url`.
/// A connection to the Redis at `url`.
pub async fn redis_at(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("redis");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("redis")
}

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

async fn admin_sql(sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(PG_ADMIN_URL)
        .await
        .expect("Postgres on 127.0.0.1:5432 (see README: Tests)");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("admin sql");
}

async fn delete_redis_prefix(prefix: &str) {
    let Ok(client) = redis::Client::open(REDIS_URL) else {
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

/// A binary of this workspace, built beside the `api` test binary.
pub fn bin_path(name: &str) -> PathBuf {
    let api = PathBuf::from(env!("CARGO_BIN_EXE_api"));
    let path = api.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (scripts/test does)",
        path.display()
    );
    path
}

/// A process that ran to its exit, and what it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A child process, killed when dropped. Its stdout lines are collected.
pub struct Process {
    /// In a mutex so a shared `&Api` can ask whether its process exited.
    child: std::sync::Mutex<Child>,
    lines: mpsc::Receiver<String>,
}

impl Process {
    fn spawn(path: &PathBuf, env: &[(String, String)]) -> Self {
        let mut command = Command::new(path);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Process {
            child: std::sync::Mutex::new(child),
            lines,
        }
    }

    pub fn wait_for_line(&self, starts_with: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(starts_with) => return line,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("no line starting with {starts_with:?} within 60 s")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!(
                        "the process exited before printing {starts_with:?} (its stderr is above)"
                    )
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// The most memory the process has held at once since it started
    /// (`VmHWM`, its peak resident set), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        peak_rss(self.pid())
    }

    /// SIGKILL: the process dies without any cleanup.
    pub fn kill_hard(&mut self) {
        let _ = self.child.get_mut().unwrap().kill();
        let _ = self.child.get_mut().unwrap().wait();
    }

    /// SIGTERM, then waits (up to 30 s) for the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.get_mut().unwrap().try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Waits (up to 30 s) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the process did not exit within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status, if the process has exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().unwrap().try_wait().ok().flatten()
    }

    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.get_mut().unwrap().try_wait().ok().flatten()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.get_mut().unwrap().kill();
        let _ = self.child.get_mut().unwrap().wait();
    }
}

/// A client of one running api.
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    /// The key requests are sent with (tenant-a unless changed).
    pub key: String,
    /// The api process; `None` for a second client of the same api.
    pub process: Option<Process>,
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the answer is a problem document with this status.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "body: {}",
            self.text
        );
        let body = self.json();
        for member in ["type", "title", "status", "detail"] {
            assert!(
                body.get(member).is_some(),
                "problem without {member}: {body}"
            );
        }
        assert_eq!(body["status"], status);
        body
    }
}

impl Api {
    pub fn as_tenant_b(&self) -> Api {
        Api {
            base: self.base.clone(),
            client: self.client.clone(),
            key: KEY_B.to_owned(),
            process: None,
        }
    }

    /// Another client of the same api, sending this key.
    pub fn with_key(&self, key: &str) -> Api {
        Api {
            base: self.base.clone(),
            client: self.client.clone(),
            key: key.to_owned(),
            process: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request with the key; `body` as JSON when given.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Reply {
        let mut request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(body);
        }
        match request.send().await {
            Ok(response) => Self::reply(response).await,
            Err(error) => {
                let exited = self.process.as_ref().and_then(Process::exited);
                panic!("request to {path} failed: {error}; the api process exit status: {exited:?}")
            }
        }
    }

    async fn reply(response: reqwest::Response) -> Reply {
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            text: response.text().await.expect("body"),
        }
    }

    pub async fn read(request: reqwest::RequestBuilder) -> Reply {
        Self::reply(request.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::POST, path, Some(body)).await
    }

    /// Submits a job and returns its object (asserting 202).
    pub async fn submit(&self, kind: &str, params: Value) -> Value {
        let reply = self.post(&format!("/v1/reports/{kind}"), &params).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
        reply.json()
    }

    pub async fn job(&self, job_id: &str) -> Value {
        let reply = self.get(&format!("/v1/jobs/{job_id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.json()
    }

    /// Long-polls until the job is final (at most 60 s).
    pub async fn wait_final(&self, job_id: &str) -> Value {
        for _ in 0..6 {
            let reply = self.get(&format!("/v1/jobs/{job_id}?wait=10")).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            let job = reply.json();
            if ["SUCCEEDED", "FAILED", "CANCELLED"].contains(&job["status"].as_str().unwrap_or(""))
            {
                return job;
            }
        }
        panic!("job {job_id} did not finish within 60 s");
    }

    /// Polls until the job has this status (at most 30 s).
    pub async fn wait_status(&self, job_id: &str, status: &str) -> Value {
        for _ in 0..600 {
            let job = self.job(job_id).await;
            if job["status"] == status {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("job {job_id} never reached {status}");
    }

    pub async fn import(&self, entries: Value) -> Reply {
        self.post("/v1/ledger/entries", &json!({ "entries": entries }))
            .await
    }
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

/// An HTTP server on 127.0.0.1 (a free port) that answers every request
/// with `handler`, sharing `data` with it: the receivers of the webhook and
/// filing tests. Stop it with the handle.
pub fn serve_on_loopback<T, F, Args>(
    data: actix_web::web::Data<T>,
    handler: F,
) -> (std::net::SocketAddr, actix_web::dev::ServerHandle)
where
    T: ?Sized + Send + Sync + 'static,
    F: actix_web::Handler<Args> + Clone + Send + 'static,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    use actix_web::{App, HttpServer, web};
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(handler.clone()))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .expect("bind the receiver");
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    (addr, handle)
}

/// A request's headers, as a client library's type (for the
/// `standardwebhooks` crate, which checks signatures over them).
pub fn headers_of(request: &actix_web::HttpRequest) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in request.headers() {
        headers.append(
            reqwest::header::HeaderName::from_bytes(name.as_str().as_bytes())
                .expect("a header name"),
            reqwest::header::HeaderValue::from_bytes(value.as_bytes()).expect("a header value"),
        );
    }
    headers
}

/// VmHWM: the most resident memory the process has had, in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}
