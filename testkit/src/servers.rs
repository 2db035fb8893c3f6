//! A Postgres and a Redis server of a run's own, on free ports, for the
//! soak and the fault tests, which crash and restart them: the machine's
//! shared servers are never touched. Redis may have replicas and Sentinels
//! of its own. All are stopped, and their files removed, when dropped.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| out.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

/// Postgres refuses to run as root: as root, its tools run as `postgres`.
fn as_postgres_user(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn postgres_bin_dir() -> PathBuf {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .filter(|dir| dir.join("initdb").exists());
    if let Some(dir) = from_pg_config {
        return dir;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server binaries (Debian: postgresql)")
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|dir| dir.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("initdb")
}

/// A Postgres cluster in a temporary directory.
pub struct PrivatePostgres {
    pub port: u16,
    max_connections: u32,
    /// Further `-c name=value` server settings.
    settings: Vec<String>,
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl PrivatePostgres {
    pub fn start() -> Self {
        Self::start_with_max_connections(200)
    }

    /// With this `max_connections` (3 of them kept for superusers).
    pub fn start_with_max_connections(max_connections: u32) -> Self {
        Self::start_with(max_connections, &[])
    }

    /// With this `max_connections` and further server settings
    /// (`name=value`), such as `shared_preload_libraries=pg_stat_statements`.
    pub fn start_with(max_connections: u32, settings: &[&str]) -> Self {
        Self::start_at(
            tempfile::tempdir().expect("temp dir"),
            max_connections,
            settings,
        )
    }

    /// With its data directory, WAL included, in a directory made under
    /// `parent` (a [`crate::volume::SmallVolume`] that a test fills).
    pub fn start_in(parent: &Path) -> Self {
        Self::start_at(
            tempfile::tempdir_in(parent).expect("a directory on the volume"),
            200,
            &[],
        )
    }

    fn start_at(dir: tempfile::TempDir, max_connections: u32, settings: &[&str]) -> Self {
        let bin = postgres_bin_dir();
        if running_as_root() {
            let status = Command::new("chown")
                .args(["postgres:", &dir.path().display().to_string()])
                .status()
                .expect("chown");
            assert!(status.success());
        }
        let status = as_postgres_user(&bin.join("initdb"))
            .args([
                "-D",
                &data_dir(dir.path()),
                "-U",
                "postgres",
                "--auth=trust",
            ])
            .args(["--no-sync", "-E", "UTF8"])
            .stdout(Stdio::null())
            .status()
            .expect("initdb");
        assert!(status.success(), "initdb failed");
        let postgres = PrivatePostgres {
            port: free_port(),
            max_connections,
            settings: settings.iter().map(|s| format!(" -c {s}")).collect(),
            bin,
            dir,
        };
        postgres.start_again();
        postgres
    }

    pub fn admin_url(&self) -> String {
        format!("{}/postgres", self.url())
    }

    /// The server's URL without a database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        as_postgres_user(&self.bin.join("pg_ctl"))
            .args(["-D", &data_dir(self.dir.path())])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|status| status.success())
            .unwrap_or(false)
    }

    /// Starts the server (again), and waits until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections={}{}",
            self.port,
            self.dir.path().display(),
            self.max_connections,
            self.settings.concat()
        );
        let log = self.dir.path().join("postgres.log").display().to_string();
        // Crash recovery on a machine busy with a parallel test run can take
        // longer than pg_ctl's default 60 s wait.
        assert!(
            self.pg_ctl(&["-o", &options, "-l", &log, "-w", "-t", "180", "start"]),
            "pg_ctl start (log: {log})"
        );
        wait_until("Postgres answers", || answers(self.port));
    }

    /// `pg_ctl stop -m immediate`: every backend is killed at once, as in
    /// a crash; the next start runs crash recovery.
    pub fn crash(&self) {
        assert!(self.pg_ctl(&["-m", "immediate", "stop"]), "pg_ctl stop");
    }
}

/// Connections to the server of `admin_url` opened until it refuses more
/// (its `max_connections` less the superusers' reserve), held until
/// dropped: another client that took every connection.
pub async fn take_every_free_connection(admin_url: &str) -> Vec<sqlx::PgConnection> {
    use sqlx::Connection;
    let mut held = Vec::new();
    while let Ok(conn) = sqlx::PgConnection::connect(admin_url).await {
        held.push(conn);
        assert!(
            held.len() < 1_000,
            "max_connections is small enough to take"
        );
    }
    held
}

/// `pg_terminate_backend` of every connection to `database` but `killer`'s
/// own; how many were cut.
pub async fn terminate_connections(killer: &mut sqlx::PgConnection, database: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()) AS t",
    )
    .bind(database)
    .fetch_one(killer)
    .await
    .expect("pg_terminate_backend")
}

fn data_dir(dir: &Path) -> String {
    dir.join("data").display().to_string()
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

/// PgBouncer in transaction pooling mode in front of a Postgres, as many
/// managed Postgres offerings run it: each transaction may be given
/// another of its few server connections. Stopped when dropped.
pub struct PrivatePgBouncer {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl PrivatePgBouncer {
    /// In front of the server at `postgres_port`, with `pool_size` server
    /// connections per database (few, so that clients share them).
    pub fn start(postgres_port: u16, pool_size: u32) -> Self {
        let program = Path::new("/usr/sbin/pgbouncer");
        assert!(
            program.exists(),
            "PgBouncer is missing (Debian: apt-get install -y pgbouncer; scripts/test installs it)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = dir.path().join("pgbouncer.ini");
        let users = dir.path().join("users.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n").expect("users file");
        // sqlx sends extra_float_digits at startup, which PgBouncer 1.18
        // refuses unless told to ignore it.
        std::fs::write(
            &config,
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={postgres_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {pool_size}\n\
                 max_client_conn = 1000\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 logfile = {log}\n",
                users = users.display(),
                log = dir.path().join("pgbouncer.log").display(),
            ),
        )
        .expect("pgbouncer.ini");
        if running_as_root() {
            // PgBouncer refuses to run as root.
            let status = Command::new("chown")
                .args(["-R", "postgres:", &dir.path().display().to_string()])
                .status()
                .expect("chown");
            assert!(status.success());
        }
        let mut command = Command::new(program);
        if running_as_root() {
            // Its own switch, not runuser's: the child is PgBouncer itself,
            // which a kill then stops.
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&config)
            .stdout(Stdio::null())
            // It logs to its log file too.
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer");
        wait_until("PgBouncer answers", || answers(port));
        PrivatePgBouncer {
            port,
            child,
            _dir: dir,
        }
    }

    /// The pooler's URL without a database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivatePgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis server that keeps nothing on disk (a restart loses every key),
/// or, with [`PrivateRedis::start_persistent`], an append-only file synced
/// on every write (a restart keeps them).
pub struct PrivateRedis {
    pub port: u16,
    persistent: bool,
    /// Set on a replica: the port of the server it replicates.
    replica_of: Option<u16>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl PrivateRedis {
    pub fn start() -> Self {
        Self::start_with(false)
    }

    pub fn start_persistent() -> Self {
        Self::start_with(true)
    }

    /// A replica of `primary`, keeping nothing on disk either; started
    /// once it has copied what `primary` holds.
    pub fn start_replica_of(primary: &PrivateRedis) -> Self {
        let mut redis = PrivateRedis {
            port: free_port(),
            persistent: false,
            replica_of: Some(primary.port),
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
        };
        redis.start_again();
        wait_until("the replica is in sync", || {
            redis_query(redis.port, &["INFO", "replication"])
                .is_some_and(|info| info.contains("master_link_status:up"))
        });
        redis
    }

    fn start_with(persistent: bool) -> Self {
        let mut redis = PrivateRedis {
            port: free_port(),
            persistent,
            replica_of: None,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
        };
        redis.start_again();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again: empty, unless persistent) and waits until
    /// it answers commands.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "already running");
        let persistence: &[&str] = if self.persistent {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let replica_of = match self.replica_of {
            Some(port) => vec![
                "--replicaof".to_owned(),
                "127.0.0.1".to_owned(),
                port.to_string(),
            ],
            None => Vec::new(),
        };
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(persistence)
            .args(replica_of)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        self.child = Some(child);
        // A server loading its append-only file accepts connections but
        // answers every command with LOADING until it is done.
        wait_until("Redis answers PING", || {
            redis_query(self.port, &["PING"]).as_deref() == Some("PONG")
        });
    }

    /// SIGKILL: the server and everything it held are gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        wait_until("Redis is gone", || !answers(self.port));
    }

    /// One command's answer as text (an array's items one per line);
    /// `None` if the server does not answer or refuses it.
    pub fn query(&self, args: &[&str]) -> Option<String> {
        redis_query(self.port, args)
    }

    /// A field of `INFO` (`used_memory`, `evicted_keys`, ...).
    pub fn info_field(&self, field: &str) -> Option<String> {
        let info = self.query(&["INFO"])?;
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .map(|value| value.trim().to_owned())
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One command's answer from the Redis (or Sentinel) on `port`, as text
/// (an array's items one per line); `None` if it does not answer.
fn redis_query(port: u16, args: &[&str]) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    let value: redis::Value = command.query(&mut conn).ok()?;
    Some(text_of(&value))
}

fn text_of(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        redis::Value::Int(n) => n.to_string(),
        redis::Value::Array(items) => items.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// Redis Sentinels watching a [`PrivateRedis`] primary under the name
/// [`PrivateSentinels::MASTER`], quick to act: a primary is down after a
/// second without an answer.
pub struct PrivateSentinels {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl PrivateSentinels {
    pub const MASTER: &str = "receipt";

    /// `count` Sentinels (a majority of them must agree on a failover),
    /// started once each knows the primary's replicas and the other
    /// Sentinels, so a failover can begin at once.
    pub fn start(primary: &PrivateRedis, count: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut sentinels = PrivateSentinels {
            ports: Vec::new(),
            children: Vec::new(),
            _dir: dir,
        };
        for n in 0..count {
            let port = free_port();
            let config = sentinels._dir.path().join(format!("sentinel-{n}.conf"));
            // Sentinel rewrites its configuration file as it learns.
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {master} 127.0.0.1 {primary} {quorum}\n\
                     sentinel down-after-milliseconds {master} 1000\n\
                     sentinel failover-timeout {master} 5000\n\
                     sentinel parallel-syncs {master} 1\n",
                    dir = sentinels._dir.path().display(),
                    master = Self::MASTER,
                    primary = primary.port,
                    quorum = count / 2 + 1,
                ),
            )
            .expect("sentinel configuration");
            // redis-sentinel is redis-server run in Sentinel mode.
            let child = Command::new("redis-server")
                .arg(&config)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server --sentinel");
            sentinels.ports.push(port);
            sentinels.children.push(child);
        }
        for &port in &sentinels.ports {
            wait_until("each Sentinel knows the replicas and the others", || {
                let replicas = redis_query(port, &["SENTINEL", "replicas", Self::MASTER]);
                let others = redis_query(port, &["SENTINEL", "sentinels", Self::MASTER]);
                replicas.is_some_and(|r| !r.is_empty())
                    && others.is_some_and(|o| o.matches("runid").count() == count - 1)
            });
        }
        sentinels
    }

    /// `REDIS_URL` for the service.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), Self::MASTER)
    }

    /// The primary's port, as the first Sentinel that answers names it.
    pub fn primary_port(&self) -> Option<u16> {
        self.ports.iter().find_map(|&port| {
            redis_query(port, &["SENTINEL", "get-master-addr-by-name", Self::MASTER])?
                .lines()
                .nth(1)?
                .parse()
                .ok()
        })
    }

    /// Waits (30 s at most) until every Sentinel names a primary other
    /// than the one on `old_port`, and that server says it is one; returns
    /// its port.
    pub fn wait_for_failover_from(&self, old_port: u16) -> u16 {
        let mut new_port = None;
        wait_until("the Sentinels fail over", || {
            let named: Vec<Option<u16>> = self
                .ports
                .iter()
                .map(|&port| {
                    redis_query(port, &["SENTINEL", "get-master-addr-by-name", Self::MASTER])
                        .and_then(|addr| addr.lines().nth(1)?.parse().ok())
                })
                .collect();
            let Some(Some(first)) = named.first().copied() else {
                return false;
            };
            let agreed = first != old_port && named.iter().all(|n| *n == Some(first));
            new_port = Some(first);
            agreed && redis_query(first, &["ROLE"]).is_some_and(|role| role.starts_with("master"))
        });
        new_port.expect("a new primary")
    }
}

impl Drop for PrivateSentinels {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
