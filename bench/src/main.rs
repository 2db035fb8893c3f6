//! Receipt's benchmark: starts the service as users run it (the embedded
//! default, or `api` + `worker` on Postgres and Redis), drives it through
//! Receipt's own client (`receipt_client`) like real clients, and prints a
//! table plus one JSON line per scenario.
//! Everything runs on this machine; every process it starts is stopped and
//! every database and Redis key it makes is removed.

use std::{
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use receipt_client::{Client, GstSummary, JobStatus, NewSchedule, Priority, RetryPolicy, Submit};
use serde_json::{Value, json};
use sqlx::{AnyPool, Row};
use testkit::{Api, Backend, Process, REDIS_URL, TestEnv};

mod backlog;
mod external;
mod graphile;
mod offered;
mod peer;
mod plot;
mod stats;
use stats::percentile;

const KEY: &str = "bench-key-0123456789abcdef";
/// A second tenant's key, for the fairness scenario.
const QUIET_KEY: &str = "bench-quiet-key-0123456789";

#[derive(Parser, Debug, Clone)]
#[command(about = "Receipt's benchmark (see docs/benchmarks.md)")]
struct Args {
    /// Scenarios, comma-separated: e2e, submit, pickup, fairness, scale, prune, report, bullmq,
    /// offered (not run by default: 10 minutes per rate and shape), peer and peer-offered (not
    /// run by default: Receipt's production shape beside the usual stack, bench/peers/usual-stack,
    /// in e2e and offered), graphile (not run by default: e2e beside graphile-worker on Postgres
    /// alone, bench/peers/graphile-worker),
    /// dashboard (not run by default: it fills `--rows` jobs), delayed and schedules (not run by
    /// default: they wait for jobs' starts and for fires), priority and caps (not run by
    /// default: they drain a backlog), backlog (not run by default: a closed-loop run, then
    /// `--backlog-jobs` jobs submitted with the pools stopped and drained by new ones), external
    /// (not run by default: no-op jobs of a built-in kind, then of a registered kind run by the
    /// Python SDK, bench/peers/python-worker, with `--concurrency` slots; pickup through its
    /// waiting lease, `--pickup-jobs` jobs).
    #[arg(
        long,
        default_value = "e2e,submit,pickup,fairness,scale,prune,report,bullmq"
    )]
    scenarios: String,
    /// embedded, production, or both.
    #[arg(long, default_value = "both")]
    shape: String,
    /// The queue of the production shape: `redis`, or `database` (Postgres
    /// alone, the job rows as its queue; the label of each result says
    /// `production-database`).
    #[arg(long, value_enum, default_value_t = QueueKind::Redis)]
    queue: QueueKind,
    /// Jobs per end-to-end run.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Slots of each worker process (`WORKER_CONCURRENCY`; the embedded
    /// shape's one pool), and the concurrent clients of e2e unless
    /// `--clients` says otherwise (and BullMQ's producers and concurrency).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Concurrent clients of e2e (default: `--concurrency`). To compare N
    /// worker processes of M slots with one of N×M, keep the clients the
    /// same: `--workers 2 --concurrency 8 --clients 16` against
    /// `--workers 1 --concurrency 16`.
    #[arg(long)]
    clients: Option<usize>,
    /// Open-loop arrival rate of the submit scenario, per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Seconds of the submit scenario (and of each half of prune).
    #[arg(long, default_value_t = 20)]
    submit_secs: u64,
    /// Open-loop arrival rate of the prune scenario, per second: below what
    /// the production shape sustains on two cores, so that the figure is
    /// the pruner's cost and not the saturation's.
    #[arg(long, default_value_t = 200)]
    prune_rate: u64,
    /// Jobs of the pickup scenario, submitted one at a time.
    #[arg(long, default_value_t = 500)]
    pickup_jobs: usize,
    /// The fairness scenario: one tenant's backlog of 50 ms sleeps, then
    /// this many jobs of another tenant, one at a time, on two slots.
    #[arg(long, default_value_t = 2_000)]
    fairness_backlog: usize,
    #[arg(long, default_value_t = 50)]
    fairness_jobs: usize,
    /// Finished jobs (scale, prune) and ledger entries (report) written beforehand.
    #[arg(long, default_value_t = 1_000_000)]
    rows: i64,
    /// The delayed scenario: jobs submitted to start later, their starts
    /// spread evenly over `--delayed-window-secs`, the first
    /// `--delayed-lead-secs` after the scenario begins (time to submit them
    /// all and to measure submits and pickups while every one waits).
    #[arg(long, default_value_t = 100_000)]
    delayed_jobs: usize,
    #[arg(long, default_value_t = 100)]
    delayed_window_secs: u64,
    #[arg(long, default_value_t = 300)]
    delayed_lead_secs: u64,
    /// The schedules scenario: this many schedules firing every minute, for
    /// `--schedule-minutes` minutes.
    #[arg(long, default_value_t = 10_000)]
    schedules: usize,
    #[arg(long, default_value_t = 2)]
    schedule_minutes: i64,
    /// The priority scenario: a tenant's backlog of low-priority 20 ms
    /// sleeps, then high-priority jobs of the same tenant one at a time.
    #[arg(long, default_value_t = 10_000)]
    priority_backlog: usize,
    /// The backlog scenario: jobs submitted while no pool runs, then
    /// drained by new pools.
    #[arg(long, default_value_t = 100_000)]
    backlog_jobs: usize,
    #[arg(long, default_value_t = 50)]
    priority_jobs: usize,
    /// The caps scenario: each of two tenants submits this many 50 ms
    /// sleeps, under MAX_RUNNING_PER_TENANT=`caps_limit`, on `workers`
    /// pools (production) of `concurrency` slots.
    #[arg(long, default_value_t = 1_000)]
    caps_jobs: usize,
    #[arg(long, default_value_t = 2)]
    caps_limit: usize,
    /// Alternating rounds of Receipt and the peer in each side by side
    /// (bullmq, peer, graphile).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Worker processes in the production shape.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// The production shape's services connect to Postgres over TLS
    /// (`sslmode=require`; the server must offer it) instead of plainly, as
    /// a service on another host than its database would.
    #[arg(long)]
    postgres_tls: bool,
    /// The offered scenario: rates in jobs/s, comma-separated, each run on
    /// a service of its own; `max` finds roughly the highest rate the
    /// shape sustains with a short ramp (`--ramp-secs` per step) and runs
    /// at it.
    #[arg(long, default_value = "200,1000")]
    rates: String,
    /// Seconds each rate is offered for.
    #[arg(long, default_value_t = 600)]
    offered_secs: u64,
    /// Each offered job's `ms`.
    #[arg(long, default_value_t = 1)]
    job_ms: u64,
    /// Submits awaiting their answer at once, at most (open loop: a submit
    /// due while this many wait is not sent, and is counted as unsent).
    #[arg(long, default_value_t = 512)]
    max_in_flight: usize,
    /// After the last submit, how long to wait for the jobs to finish.
    #[arg(long, default_value_t = 120)]
    drain_secs: u64,
    /// Seconds of each step of the `max` ramp.
    #[arg(long, default_value_t = 10)]
    ramp_secs: u64,
    /// Where the offered scenario writes its plots
    /// (`offered-{shape}-{rate}-{workers}x{slots}.svg`); none when unset.
    #[arg(long)]
    plot_dir: Option<std::path::PathBuf>,
    /// Jobs run through each new service before a scenario, after which
    /// Postgres takes its planner statistics (0: none). Measures the
    /// service as it runs after its first minute, not while Postgres still
    /// plans for tables of a few rows.
    #[arg(long, default_value_t = 2_000)]
    warm_up: usize,
}

/// Where the production shape keeps its queue.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum QueueKind {
    Redis,
    Database,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Embedded,
    Production,
}

impl Shape {
    /// The label of a result: the shape, and the production shape's queue
    /// when it is not Redis.
    fn label(self, queue: QueueKind) -> &'static str {
        match (self, queue) {
            (Shape::Embedded, _) => "embedded",
            (Shape::Production, QueueKind::Redis) => "production",
            (Shape::Production, QueueKind::Database) => "production-database",
        }
    }
}

impl Shape {
    /// A moment in SQL from unix milliseconds: `timestamptz` on Postgres,
    /// the milliseconds themselves on SQLite.
    fn moment(self, millis: &str) -> String {
        match self {
            Shape::Production => format!("to_timestamp(({millis}) / 1000.0)"),
            Shape::Embedded => millis.to_owned(),
        }
    }

    /// A flag in SQL from a condition: `boolean` on Postgres, 0/1 on SQLite.
    fn flag(self, condition: &str) -> String {
        match self {
            Shape::Production => format!("({condition})"),
            Shape::Embedded => format!("CASE WHEN {condition} THEN 1 ELSE 0 END"),
        }
    }

    /// A date in SQL from `YYYY-MM-DD` text.
    fn date(self, text: &str) -> String {
        match self {
            Shape::Production => format!("({text})::date"),
            Shape::Embedded => text.to_owned(),
        }
    }
}

fn print_result(scenario: &str, shape: &str, line: Value, summary: &str) {
    println!("{scenario:<9} {shape:<11} {summary}");
    let mut line = line;
    line["scenario"] = json!(scenario);
    line["shape"] = json!(shape);
    println!("{line}");
}

/// A service under test: its processes, on a database and queue prefix of
/// its own (`testkit`), all removed when it is dropped, even when a
/// scenario fails part way.
struct Service {
    shape: Shape,
    queue: QueueKind,
    /// The api process.
    api: Api,
    /// Clients of the api as the bench tenant and as the quiet one.
    client: Client,
    quiet: Client,
    workers: Vec<Process>,
    /// Worker slots in all: `--concurrency` per process (the embedded
    /// shape has one pool, in the api).
    slots: usize,
    /// Dropped last: the processes stop before their database goes.
    env: TestEnv,
}

impl Service {
    /// The shape as `args` lay it out: `--queue`, `--workers` processes of
    /// `--concurrency` slots, `--warm-up` jobs.
    async fn start(shape: Shape, args: &Args) -> Result<Self> {
        Self::start_with(shape, args, args.concurrency, &[]).await
    }

    /// [`Service::start`] with `concurrency` slots per pool and `extra`
    /// settings on every process.
    async fn start_with(
        shape: Shape,
        args: &Args,
        concurrency: usize,
        extra: &[(&str, &str)],
    ) -> Result<Self> {
        for binary in ["api", "worker"] {
            testkit::binary(binary).context("scripts/bench builds the release binaries")?;
        }
        let backend = match shape {
            Shape::Embedded => Backend::Sqlite,
            Shape::Production => Backend::PgRedis,
        };
        let keys = format!("bench:{KEY},quiet:{QUIET_KEY}");
        let concurrency_setting = concurrency.to_string();
        let inherited = inherited_settings()?;
        let mut settings: Vec<(&str, &str)> = inherited
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        settings.extend([
            ("API_KEYS", keys.as_str()),
            ("ENABLE_DIAGNOSTIC_KINDS", "true"),
            ("WORKER_CONCURRENCY", concurrency_setting.as_str()),
            ("RUST_LOG", "error"),
        ]);
        if shape == Shape::Production {
            settings.push(("EMBEDDED_WORKER", "false"));
        }
        settings.extend_from_slice(extra);
        let mut env = TestEnv::new(backend).await.settings(&settings);
        if args.postgres_tls {
            env.database_url = env
                .database_url
                .replace("sslmode=disable", "sslmode=require");
        }
        let queue = args.queue;
        if shape == Shape::Production && queue == QueueKind::Database {
            env = env.without_redis();
        }
        let api = env.start_api(&[]).await;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let client = bench_client(&api.base, KEY, http.clone())?;
        let quiet = bench_client(&api.base, QUIET_KEY, http)?;
        let workers: Vec<Process> = match shape {
            Shape::Production => (0..args.workers)
                .map(|_| env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]))
                .collect(),
            Shape::Embedded => Vec::new(),
        };
        // The workers are ready for messages before anything is timed: on
        // Redis once each pool's heartbeat is there; where the job rows are
        // the queue once each process has connected and migrated (it serves its
        // metrics after that), and the warm-up runs its first jobs.
        if shape == Shape::Production {
            match queue {
                QueueKind::Redis => env.wait_for_redis_consumers(workers.len()).await,
                QueueKind::Database => {
                    for worker in &workers {
                        worker.wait_for_line("metrics on http://");
                    }
                }
            }
        }
        let slots = concurrency * workers.len().max(1);
        let service = Service {
            shape,
            queue,
            api,
            client,
            quiet,
            workers,
            slots,
            env,
        };
        if args.warm_up > 0 {
            warm_up(&service.target(), args.warm_up, concurrency).await?;
        }
        Ok(service)
    }

    /// The label of its results (`production-database` and so on).
    fn label(&self) -> &'static str {
        self.shape.label(self.queue)
    }

    /// Whether its processes use Redis.
    fn uses_redis(&self) -> bool {
        self.env.uses_redis() && self.shape == Shape::Production
    }

    /// The api's base URL.
    fn base(&self) -> &str {
        &self.api.base
    }

    /// The Postgres database's name (production).
    fn pg_database(&self) -> Option<&str> {
        self.env.database_name()
    }

    /// The watcher's pool: one connection, so [`backends`] can leave it out.
    async fn pool(&self) -> Result<AnyPool> {
        watcher_pool(&self.env.database_url).await
    }

    /// Peak resident memory of each process, in MiB.
    fn peak_rss(&self) -> Value {
        let peak = testkit::peak_rss_mib;
        json!({
            "api_mib": peak(self.api.pid()),
            "worker_mib": self.workers.iter().map(|w| peak(w.pid())).collect::<Vec<_>>(),
        })
    }

    /// Stops the processes, then drops the database and the queue's keys.
    async fn stop(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}

/// A client of the api at `base` as the tenant of `key`. It sends each
/// request once: the bench measures the service, and a retry would hide a
/// failure inside a slower answer, so a failure is counted (the open-loop
/// scenarios) or ends the run.
fn bench_client(base: &str, key: &str, http: reqwest::Client) -> Result<Client> {
    Ok(Client::builder(base, key)
        .http_client(http)
        .retry(RetryPolicy::single_try())
        .build()?)
}

/// A `sleep` job of `ms` milliseconds, its body `ms` alone: the least a
/// job can give the service to parse and store.
fn sleep(ms: u64) -> Submit {
    Submit::json("sleep", json!({ "ms": ms }))
}

/// What a load drives and watches: a service as its client sees it, the
/// database where its jobs are, and its processes. Receipt's shapes and
/// the usual-stack peer ([`peer`]) both keep their jobs in a table `jobs`
/// with the columns the scenarios read.
struct Target<'a> {
    label: String,
    /// The client the load submits through, as `tenant`.
    client: &'a Client,
    tenant: &'static str,
    database_url: &'a str,
    /// Which SQL the database speaks.
    dialect: Shape,
    /// Whose CPU is the service's.
    watched: Watched<'a>,
    /// Worker slots in all.
    slots: usize,
}

/// Where a system under test spends its CPU (see [`CpuMeter`]).
struct Watched<'a> {
    /// The Postgres database's name, whose backends' CPU is counted.
    pg_database: Option<&'a str>,
    /// Each process of the system: its role (`api`, `worker`, `producers`)
    /// and pid.
    processes: Vec<(&'static str, u32)>,
    /// Whether Redis's CPU is the system's.
    redis: bool,
}

impl Target<'_> {
    /// The watcher's pool: one connection, so [`backends`] can leave it out.
    async fn pool(&self) -> Result<AnyPool> {
        watcher_pool(self.database_url).await
    }

    /// `{processes}x{slots of each}` of its workers (one pool when the api
    /// runs them).
    fn layout(&self) -> String {
        let workers = self
            .watched
            .processes
            .iter()
            .filter(|(role, _)| *role == "worker")
            .count()
            .max(1);
        format!("{workers}x{}", self.slots / workers)
    }
}

impl Service {
    /// The service as the bench tenant drives it.
    fn target(&self) -> Target<'_> {
        let mut processes = vec![("api", self.api.pid())];
        processes.extend(self.workers.iter().map(|w| ("worker", w.pid())));
        Target {
            label: self.label().to_owned(),
            client: &self.client,
            tenant: "bench",
            database_url: &self.env.database_url,
            dialect: self.shape,
            watched: Watched {
                pg_database: self.pg_database(),
                processes,
                redis: self.uses_redis(),
            },
            slots: self.slots,
        }
    }
}

/// Runs `jobs` jobs through the service and, on Postgres, has the
/// database take its planner statistics, as a deployment's own traffic
/// and autovacuum have within its first minute. Without it, Postgres
/// plans each prepared statement for the tables of a few rows it sees
/// in the first second, and a run keeps those plans to its end (see
/// docs/performance-history.md, "Findings"). SQLite takes statistics only when
/// told to, which Receipt never does, so it is left without.
async fn warm_up(target: &Target<'_>, jobs: usize, concurrency: usize) -> Result<()> {
    end_to_end(target, jobs, concurrency).await?;
    if target.dialect == Shape::Production {
        take_statistics(target.database_url).await?;
    }
    println!("# warmed up with {jobs} jobs");
    Ok(())
}

/// Has Postgres take its planner statistics of the database at `url`
/// (`ANALYZE`), for the reason [`warm_up`] gives.
async fn take_statistics(url: &str) -> Result<()> {
    let pool = watcher_pool(url).await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// A pool of one connection to `url`.
async fn watcher_pool(url: &str) -> Result<AnyPool> {
    sqlx::any::install_default_drivers();
    Ok(sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?)
}

/// What one end-to-end run measured.
struct Run {
    jobs_per_s: f64,
    /// CPU milliseconds per job, by process (see [`CpuMeter`]).
    cpu_ms_per_job: Value,
}

/// Scenario 1: N jobs by C concurrent clients, from the first submit until
/// the database counts all N SUCCEEDED.
async fn end_to_end(target: &Target<'_>, jobs: usize, concurrency: usize) -> Result<Run> {
    end_to_end_of(target, jobs, concurrency, &sleep(0)).await
}

/// [`end_to_end`] of jobs such as `job`.
async fn end_to_end_of(
    target: &Target<'_>,
    jobs: usize,
    concurrency: usize,
    job: &Submit,
) -> Result<Run> {
    let pool = target.pool().await?;
    let meter = CpuMeter::start(&target.watched, &pool).await?;
    let started = Instant::now();
    let first_id = submit_all_of(target.client, jobs, concurrency, job).await?;
    println!(
        "# e2e: every submit answered after {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let elapsed = until_none_waiting(target, &pool, &first_id, jobs, started).await?;
    let cpu_ms_per_job = meter.per_job(&pool, jobs).await?;
    pool.close().await;
    Ok(Run {
        jobs_per_s: jobs as f64 / elapsed.as_secs_f64(),
        cpu_ms_per_job,
    })
}

/// Submits `jobs` `sleep` jobs of 0 ms from `concurrency` clients, each
/// sending its next when its last is answered; returns the first job's id
/// (submitted before the others, so every job of the run has an id at or
/// after it).
async fn submit_all(client: &Client, jobs: usize, concurrency: usize) -> Result<String> {
    submit_all_of(client, jobs, concurrency, &sleep(0)).await
}

/// [`submit_all`] of jobs such as `job`.
async fn submit_all_of(
    client: &Client,
    jobs: usize,
    concurrency: usize,
    job: &Submit,
) -> Result<String> {
    let first_id = client.submit(job.clone()).await?.job_id;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(1));
    let clients = (0..concurrency).map(|_| {
        let next = next.clone();
        async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < jobs {
                client.submit(job.clone()).await?;
            }
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(clients).await?;
    Ok(first_id)
}

/// Waits until none of the run's jobs (`jobs` of them, from `first_id`)
/// waits or runs, and checks that all SUCCEEDED; returns the time since
/// `started`. Called once every submit is answered (no job can be the
/// last to finish before that), it counts the unfinished ones, which an
/// index finds without reading the finished (a count of the finished
/// every 20 ms would read up to N rows each time, load that Receipt would
/// pay).
async fn until_none_waiting(
    target: &Target<'_>,
    pool: &AnyPool,
    first_id: &str,
    jobs: usize,
    started: Instant,
) -> Result<Duration> {
    let elapsed = loop {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = $1
             AND status IN ('QUEUED', 'RUNNING') AND job_id >= $2",
        )
        .bind(target.tenant)
        .bind(first_id)
        .fetch_one(pool)
        .await?;
        if row.try_get::<i64, _>("n")? == 0 {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = $1 AND status = 'SUCCEEDED' AND job_id >= $2",
    )
    .bind(target.tenant)
    .bind(first_id)
    .fetch_one(pool)
    .await?;
    let succeeded = row.try_get::<i64, _>("n")? as usize;
    anyhow::ensure!(
        succeeded == jobs,
        "{succeeded} of {jobs} jobs SUCCEEDED; the others did not"
    );
    Ok(elapsed)
}

/// CPU time used while a run lasts, by process: the system's processes
/// (Receipt's `api` and `worker`s, a peer's own), the Postgres backends
/// serving the run's database, Redis when the system uses it, and this
/// client. Unlike jobs/s, CPU per job hardly moves when the machine is busy
/// with something else: it says where the work goes.
struct CpuMeter {
    /// Role, pid and CPU seconds at the start, of each process.
    processes: Vec<(&'static str, u32, f64)>,
    /// The database whose backends are counted.
    pg_database: Option<String>,
    /// Per backend pid at the start (backends started later count from 0).
    postgres: std::collections::HashMap<u32, f64>,
    redis: Option<(u32, f64)>,
    client: f64,
}

impl CpuMeter {
    async fn start(watched: &Watched<'_>, pool: &AnyPool) -> Result<Self> {
        let postgres = match watched.pg_database {
            Some(db) => backends(pool, db)
                .await?
                .into_iter()
                .map(|pid| (pid, cpu_seconds(pid).unwrap_or(0.0)))
                .collect(),
            None => Default::default(),
        };
        let redis = if watched.redis {
            let pid = redis_pid().await?;
            Some((pid, cpu_seconds(pid).unwrap_or(0.0)))
        } else {
            None
        };
        Ok(CpuMeter {
            processes: watched
                .processes
                .iter()
                .map(|&(role, pid)| (role, pid, cpu_seconds(pid).unwrap_or(0.0)))
                .collect(),
            pg_database: watched.pg_database.map(str::to_owned),
            postgres,
            redis,
            client: cpu_seconds(std::process::id()).unwrap_or(0.0),
        })
    }

    /// CPU milliseconds per job since the start, by role (each role's
    /// processes summed), `postgres`, `redis`, their `total`, and the
    /// `bench_client`.
    async fn per_job(&self, pool: &AnyPool, jobs: usize) -> Result<Value> {
        let ms_per_job = |seconds: f64| ms_per_job(seconds, jobs);
        let used = |pid: u32, before: f64| cpu_seconds(pid).map_or(0.0, |now| now - before);
        let mut by_role = serde_json::Map::new();
        let mut total = 0.0;
        for &(role, pid, before) in &self.processes {
            let seconds = used(pid, before);
            total += seconds;
            let sum = by_role.get(role).and_then(Value::as_f64).unwrap_or(0.0) + seconds;
            by_role.insert(role.to_owned(), json!(sum));
        }
        let postgres: f64 = match &self.pg_database {
            Some(db) => backends(pool, db)
                .await?
                .into_iter()
                .map(|pid| used(pid, self.postgres.get(&pid).copied().unwrap_or(0.0)))
                .sum(),
            None => 0.0,
        };
        let redis = self.redis.map_or(0.0, |(pid, before)| used(pid, before));
        total += postgres + redis;
        let mut line: serde_json::Map<String, Value> = by_role
            .into_iter()
            .map(|(role, seconds)| (role, json!(ms_per_job(seconds.as_f64().unwrap_or(0.0)))))
            .collect();
        line.insert("postgres".into(), json!(ms_per_job(postgres)));
        line.insert("redis".into(), json!(ms_per_job(redis)));
        line.insert("total".into(), json!(ms_per_job(total)));
        line.insert(
            "bench_client".into(),
            json!(ms_per_job(used(std::process::id(), self.client))),
        );
        Ok(Value::Object(line))
    }
}

/// CPU seconds spread over `jobs`, in milliseconds to three decimals (a
/// microsecond per job is below what clock ticks resolve).
fn ms_per_job(seconds: f64, jobs: usize) -> f64 {
    (1_000_000.0 * seconds / jobs as f64).round() / 1000.0
}

/// `api 0.16 + worker 0.43 + postgres 0.72 + redis 0.22 = 1.53 (bench client 0.07)`
fn cpu_summary(cpu: &Value) -> String {
    let ms = |name: &str| cpu[name].as_f64().unwrap_or(f64::NAN);
    let parts: Vec<String> = ["api", "producers", "worker", "sdk", "postgres", "redis"]
        .into_iter()
        .filter(|name| ms(name) > 0.0)
        .map(|name| format!("{name} {:.2}", ms(name)))
        .collect();
    format!(
        "{} = {:.2} (bench client {:.2})",
        parts.join(" + "),
        ms("total"),
        ms("bench_client")
    )
}

/// The Postgres backends serving `db`, but not the one asking (the bench's
/// own watcher, whose pool holds one connection).
async fn backends(pool: &AnyPool, db: &str) -> Result<Vec<u32>> {
    let rows = sqlx::query(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| Ok(u32::try_from(row.try_get::<i32, _>("pid")?)?))
        .collect()
}

async fn redis_pid() -> Result<u32> {
    let client = redis::Client::open(REDIS_URL)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .context("INFO server has no process_id")?
        .trim()
        .parse()
        .context("process_id")
}

/// User plus system CPU seconds of a process (`/proc/{pid}/stat`).
fn cpu_seconds(pid: u32) -> Option<f64> {
    proc_stat_seconds(&format!("/proc/{pid}/stat"), 11)
}

/// User plus system CPU seconds of this process's children that have been
/// waited for (the BullMQ side runs as one).
fn waited_children_cpu_seconds() -> Option<f64> {
    proc_stat_seconds("/proc/self/stat", 13)
}

/// Two adjacent clock-tick fields of a `/proc/.../stat` file, counted from
/// the first field after the command name (which may hold spaces), in
/// seconds.
fn proc_stat_seconds(path: &str, first: usize) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 =
        fields.get(first)?.parse::<u64>().ok()? + fields.get(first + 1)?.parse::<u64>().ok()?;
    let per_second = rustix::param::clock_ticks_per_second();
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// Scenario 2: open loop at a fixed rate; latency is measured from each
/// request's scheduled time, so a stall counts against every request it
/// delays (the coordinated-omission correction).
async fn submit_only(service: &Service, rate: u64, secs: u64) -> Result<Value> {
    let total = rate * secs;
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let tasks: Vec<_> = (0..total)
        .map(|i| {
            let client = service.client.clone();
            let scheduled = start + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::spawn(async move {
                tokio::time::sleep_until(scheduled).await;
                let answer = client.submit(sleep(0)).await;
                if let Err(error) = &answer {
                    eprintln!("# submit failed: {error:#}");
                }
                let ok = answer.is_ok();
                (ok, scheduled.elapsed().as_secs_f64() * 1000.0)
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(tasks.len());
    // Latencies by the second they were scheduled in: a tail made of a
    // few stalls shows as a few bad seconds, a slow service as all of them.
    let mut by_second = vec![Vec::new(); secs as usize];
    let mut errors = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        let (ok, ms) = task.await?;
        if !ok {
            errors += 1;
        }
        latencies.push(ms);
        by_second[(i as u64 / rate.max(1)).min(secs.saturating_sub(1)) as usize].push(ms);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let max_by_second: Vec<f64> = by_second
        .iter_mut()
        .map(|second| {
            second.sort_by(f64::total_cmp);
            (percentile(second, 1.0) * 10.0).round() / 10.0
        })
        .collect();
    Ok(json!({
        "requests": total, "errors": errors, "achieved_per_s": total as f64 / elapsed,
        "p50_ms": percentile(&latencies, 0.5), "p99_ms": percentile(&latencies, 0.99),
        "p999_ms": percentile(&latencies, 0.999), "max_ms_by_second": max_by_second,
    }))
}

/// Milliseconds from one RFC 3339 time of a job to another.
fn millis_between(from: &str, to: Option<&str>) -> Option<f64> {
    Some(rfc3339_ms(to?)? - rfc3339_ms(from)?)
}

fn rfc3339_ms(text: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_micros() as f64 / 1000.0)
}

/// `started_at - created_at` of `count` jobs `job` makes, submitted by
/// `client` one at a time, each after the one before finished (or was
/// waited for a minute); sorted.
async fn pickup_latencies(client: &Client, job: &Submit, count: usize) -> Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let submitted = client.submit(job.clone()).await?;
        let done = match client
            .wait(&submitted.job_id, Duration::from_secs(60))
            .await
        {
            Ok(done) => done,
            // Still running: it has started all the same.
            Err(receipt_client::Error::WaitTimedOut(seen)) => *seen,
            Err(error) => return Err(error.into()),
        };
        if let Some(ms) = millis_between(&done.created_at, done.started_at.as_deref()) {
            latencies.push(ms);
        }
    }
    latencies.sort_by(f64::total_cmp);
    Ok(latencies)
}

/// Scenario 3: an idle system, jobs one at a time: `started_at - created_at`.
async fn pickup(service: &Service, count: usize) -> Result<Value> {
    let latencies = pickup_latencies(&service.client, &sleep(0), count).await?;
    Ok(
        json!({"jobs": count, "p50_ms": percentile(&latencies, 0.5), "p99_ms": percentile(&latencies, 0.99)}),
    )
}

/// Scenario: fairness. One tenant submits a backlog of 50 ms sleeps (on
/// two slots, `backlog` × 25 ms of work); then another tenant submits jobs
/// one at a time while that backlog waits: `started_at - created_at` of
/// the second tenant's jobs, and how much of the backlog was still waiting
/// at the end (so the figure was taken behind it).
async fn fairness(service: &Service, backlog: usize, count: usize) -> Result<Value> {
    use futures::StreamExt;
    let backlog_started = Instant::now();
    let submitted: Vec<_> = futures::stream::iter(0..backlog)
        .map(|_| service.client.submit(sleep(50)))
        .buffer_unordered(32)
        .collect()
        .await;
    for result in submitted {
        result?;
    }
    let backlog_secs = backlog_started.elapsed().as_secs_f64();
    let latencies = pickup_latencies(&service.quiet, &sleep(0), count).await?;
    let pool = service.pool().await?;
    let waiting: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = 'bench' AND status = 'QUEUED'",
    )
    .fetch_one(&pool)
    .await?
    .try_get("n")?;
    pool.close().await;
    Ok(json!({
        "backlog": backlog,
        "backlog_submit_s": backlog_secs,
        "backlog_still_queued": waiting,
        "jobs": latencies.len(),
        "p50_ms": percentile(&latencies, 0.5),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": latencies.last().copied().unwrap_or(f64::NAN),
    }))
}

/// Scenario: delayed jobs. Submit and pickup latency on an idle service;
/// then `--delayed-jobs` jobs of a second tenant submitted to start later
/// (their starts spread over a window that opens after the lead); the same
/// submit and pickup figures while all of them wait; then how late each
/// delayed job started (`started_at - run_at`, read from the table).
async fn delayed(service: &Service, args: &Args) -> Result<Value> {
    use futures::StreamExt;
    let idle_submit = submit_only(service, args.rate, args.submit_secs).await?;
    let idle_pickup = pickup(service, args.pickup_jobs).await?;
    let count = args.delayed_jobs;
    let first_start =
        chrono::Utc::now().timestamp_millis() + i64::try_from(args.delayed_lead_secs * 1000)?;
    let spacing = (args.delayed_window_secs * 1000) as f64 / count.max(1) as f64;
    let client = &service.quiet;
    let fill_started = Instant::now();
    let submitted: Vec<Result<()>> = futures::stream::iter(0..count)
        .map(|i| async move {
            let at = first_start + (i as f64 * spacing) as i64;
            let at = chrono::DateTime::from_timestamp_millis(at)
                .context("a time")?
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            client.submit(sleep(0).run_at(at)).await?;
            Ok(())
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for result in submitted {
        result?;
    }
    let fill_s = fill_started.elapsed().as_secs_f64();
    // As after the warm-up: what autovacuum and the next checkpoint do
    // after a burst of inserts is done before anything is timed, so the
    // figure is the waiting jobs' cost, not the aftermath of writing them.
    if service.shape == Shape::Production {
        let pool = service.pool().await?;
        sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
        sqlx::query("CHECKPOINT").execute(&pool).await?;
        pool.close().await;
    }
    let waiting_submit = submit_only(service, args.rate, args.submit_secs).await?;
    let waiting_pickup = pickup(service, args.pickup_jobs).await?;
    let measured_by = chrono::Utc::now().timestamp_millis();
    if measured_by > first_start {
        eprintln!(
            "# the first delayed start came {} ms before the measurements ended: raise --delayed-lead-secs",
            measured_by - first_start
        );
    }
    let pool = service.pool().await?;
    let within = Duration::from_secs(args.delayed_lead_secs + args.delayed_window_secs + 600);
    let unfinished =
        "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = 'quiet' AND status <> 'SUCCEEDED'";
    wait_for_count(&pool, unfinished, &[], within, |left| left == 0).await?;
    let lateness_sql = match service.shape {
        Shape::Production => {
            "SELECT (EXTRACT(EPOCH FROM started_at - run_after) * 1000)::float8 AS ms
             FROM jobs WHERE tenant_id = 'quiet'"
        }
        Shape::Embedded => {
            "SELECT CAST(started_at - run_after AS REAL) AS ms FROM jobs WHERE tenant_id = 'quiet'"
        }
    };
    let lateness = sorted_ms(&pool, lateness_sql, &[]).await?;
    pool.close().await;
    Ok(json!({
        "delayed_jobs": count,
        "window_s": args.delayed_window_secs,
        "fill_s": fill_s,
        "idle": {"submit": idle_submit, "pickup": idle_pickup},
        "waiting": {"submit": waiting_submit, "pickup": waiting_pickup},
        "lateness_p50_ms": percentile(&lateness, 0.5),
        "lateness_p99_ms": percentile(&lateness, 0.99),
        "lateness_max_ms": lateness.last().copied().unwrap_or(f64::NAN),
        "early": lateness.iter().filter(|ms| **ms < 0.0).count(),
    }))
}

/// Scenario: priority. `--priority-backlog` low-priority 20 ms sleeps of
/// one tenant, then `--priority-jobs` high-priority jobs of the same tenant
/// one at a time while that backlog waits: `started_at - created_at` of
/// each high job, and how much of the backlog was still waiting at the end.
async fn priority(service: &Service, args: &Args) -> Result<Value> {
    use futures::StreamExt;
    let client = &service.client;
    let backlog_started = Instant::now();
    let submitted: Vec<_> = futures::stream::iter(0..args.priority_backlog)
        .map(|_| client.submit(sleep(20).priority(Priority::Low)))
        .buffer_unordered(32)
        .collect()
        .await;
    for result in submitted {
        result?;
    }
    let backlog_secs = backlog_started.elapsed().as_secs_f64();
    let high = sleep(0).priority(Priority::High);
    let latencies = pickup_latencies(client, &high, args.priority_jobs).await?;
    let pool = service.pool().await?;
    let waiting: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = 'bench' AND status = 'QUEUED'",
    )
    .fetch_one(&pool)
    .await?
    .try_get("n")?;
    pool.close().await;
    Ok(json!({
        "backlog": args.priority_backlog,
        "backlog_submit_s": backlog_secs,
        "backlog_still_queued": waiting,
        "jobs": latencies.len(),
        "p50_ms": percentile(&latencies, 0.5),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": latencies.last().copied().unwrap_or(f64::NAN),
    }))
}

/// Scenario: concurrency caps under contention. Two tenants each submit
/// `--caps-jobs` 50 ms sleeps at once into a service whose every process
/// caps a tenant at `--caps-limit` running jobs; a watcher samples each
/// tenant's RUNNING jobs every 5 ms until all are done. The highest count
/// ever sampled, how often a tenant ran at its cap, and the throughput.
async fn caps(service: &Service, args: &Args) -> Result<Value> {
    use futures::StreamExt;
    let clients = [&service.client, &service.quiet];
    let started = Instant::now();
    let submitted: Vec<_> = futures::stream::iter(0..args.caps_jobs * 2)
        .map(|i| clients[i % 2].submit(sleep(50)))
        .buffer_unordered(32)
        .collect()
        .await;
    for result in submitted {
        result?;
    }
    let pool = service.pool().await?;
    let limit = i64::try_from(args.caps_limit)?;
    let (mut most, mut samples, mut at_cap) = (0_i64, 0_u64, 0_u64);
    loop {
        let rows = sqlx::query(
            "SELECT tenant_id, COUNT(*) AS n FROM jobs WHERE status = 'RUNNING' GROUP BY tenant_id",
        )
        .fetch_all(&pool)
        .await?;
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            most = most.max(n);
            at_cap += u64::from(n == limit);
        }
        samples += 1;
        let left: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM jobs WHERE status IN ('QUEUED', 'RUNNING')")
                .fetch_one(&pool)
                .await?
                .try_get("n")?;
        if left == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(1_800),
            "{left} jobs still unfinished after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed().as_secs_f64();
    pool.close().await;
    Ok(json!({
        "jobs": args.caps_jobs * 2,
        "limit": limit,
        "most_running_sampled": most,
        "samples": samples,
        "share_of_samples_at_cap": at_cap as f64 / (2 * samples).max(1) as f64,
        "took_s": took,
        "jobs_per_s": (args.caps_jobs * 2) as f64 / took,
        "ideal_jobs_per_s": 2.0 * args.caps_limit as f64 / 0.05,
    }))
}

/// `sql` with `binds` bound in order.
fn query_with(
    sql: &'static str,
    binds: &[i64],
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    binds
        .iter()
        .fold(sqlx::query(sql), |query, value| query.bind(*value))
}

/// Waits, looking once a second, until the count `sql` reads (a column
/// `n`) satisfies `done`; fails after `within`.
async fn wait_for_count(
    pool: &AnyPool,
    sql: &'static str,
    binds: &[i64],
    within: Duration,
    done: impl Fn(i64) -> bool,
) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let n: i64 = query_with(sql, binds).fetch_one(pool).await?.try_get("n")?;
        if done(n) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "still {n} after {within:?}: {sql}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The column `ms` of what `sql` reads, sorted.
async fn sorted_ms(pool: &AnyPool, sql: &'static str, binds: &[i64]) -> Result<Vec<f64>> {
    let mut values: Vec<f64> = query_with(sql, binds)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| row.try_get::<f64, _>("ms"))
        .collect::<std::result::Result<_, _>>()?;
    values.sort_by(f64::total_cmp);
    Ok(values)
}

/// Scenario: `--schedules` schedules of a second tenant, each firing every
/// minute, for `--schedule-minutes` minutes: when each fire's job was made
/// (`created_at - fire_at`: negative, made ahead) and started
/// (`started_at - fire_at`), read from the table.
async fn schedules(service: &Service, args: &Args) -> Result<Value> {
    use futures::StreamExt;
    let every_minute = NewSchedule::new("sleep", json!({"ms": 0}), "* * * * *", "UTC");
    let create_started = Instant::now();
    let created: Vec<_> = futures::stream::iter(0..args.schedules)
        .map(|_| service.quiet.create_schedule(&every_minute))
        .buffer_unordered(32)
        .collect()
        .await;
    for result in created {
        result?;
    }
    let create_s = create_started.elapsed().as_secs_f64();
    // Every fire from the first whole minute after they all exist.
    let first_fire = (chrono::Utc::now().timestamp_millis() / 60_000 + 1) * 60_000;
    let expected = args.schedules as i64 * args.schedule_minutes;
    let pool = service.pool().await?;
    // Counted once started, so each has both times.
    let (count_sql, made_sql, started_sql) = match service.shape {
        Shape::Production => (
            "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = 'quiet' AND started_at IS NOT NULL
               AND fire_at >= to_timestamp($1 / 1000.0) AND fire_at < to_timestamp($2 / 1000.0)",
            "SELECT (EXTRACT(EPOCH FROM created_at - fire_at) * 1000)::float8 AS ms FROM jobs
             WHERE tenant_id = 'quiet' AND fire_at >= to_timestamp($1 / 1000.0)
               AND fire_at < to_timestamp($2 / 1000.0)",
            "SELECT (EXTRACT(EPOCH FROM started_at - fire_at) * 1000)::float8 AS ms FROM jobs
             WHERE tenant_id = 'quiet' AND fire_at >= to_timestamp($1 / 1000.0)
               AND fire_at < to_timestamp($2 / 1000.0)",
        ),
        Shape::Embedded => (
            "SELECT COUNT(*) AS n FROM jobs WHERE tenant_id = 'quiet' AND started_at IS NOT NULL
               AND fire_at >= $1 AND fire_at < $2",
            "SELECT CAST(created_at - fire_at AS REAL) AS ms FROM jobs
             WHERE tenant_id = 'quiet' AND fire_at >= $1 AND fire_at < $2",
            "SELECT CAST(started_at - fire_at AS REAL) AS ms FROM jobs
             WHERE tenant_id = 'quiet' AND fire_at >= $1 AND fire_at < $2",
        ),
    };
    let end = first_fire + args.schedule_minutes * 60_000;
    let within = Duration::from_millis(u64::try_from(end - chrono::Utc::now().timestamp_millis())?)
        + Duration::from_secs(120);
    let fires = [first_fire, end];
    wait_for_count(&pool, count_sql, &fires, within, |made| made >= expected).await?;
    let made = sorted_ms(&pool, made_sql, &fires).await?;
    let started = sorted_ms(&pool, started_sql, &fires).await?;
    pool.close().await;
    Ok(json!({
        "schedules": args.schedules,
        "minutes": args.schedule_minutes,
        "create_s": create_s,
        "jobs": made.len(),
        "made_p50_ms": percentile(&made, 0.5),
        "made_p99_ms": percentile(&made, 0.99),
        "made_max_ms": made.last().copied().unwrap_or(f64::NAN),
        "started_p50_ms": percentile(&started, 0.5),
        "started_p99_ms": percentile(&started, 0.99),
        "started_max_ms": started.last().copied().unwrap_or(f64::NAN),
        "started_early": started.iter().filter(|ms| **ms < 0.0).count(),
    }))
}

/// Writes `rows` SUCCEEDED jobs with their results straight into the
/// tables (ids sort before any real one), finished at `finished_at` (unix
/// ms): now, as a service that has run for a while holds within its
/// retention; or long ago, as one holds after an upgrade that brings the
/// pruner to years of jobs. Each chunk's jobs and results commit together,
/// so a pruner at work never finds a job without its result.
async fn prefill_jobs(service: &Service, rows: i64, finished_at: i64) -> Result<()> {
    let pool = service.pool().await?;
    let id = match service.shape {
        Shape::Production => "'job_00000000' || lpad(i::text, 24, '0')",
        Shape::Embedded => "'job_00000000' || substr('000000000000000000000000' || i, -24, 24)",
    };
    let shape = service.shape;
    let values = format!(
        "{id}, 'bench', 'sleep', '{{\"ms\":0}}', 'SUCCEEDED', 1, 5, 1.0, {zero}, {zero}, {finished}, {zero}, {no}",
        zero = shape.moment("0"),
        finished = shape.moment(&finished_at.to_string()),
        no = shape.flag("1 = 0"),
    );
    let columns = "job_id, tenant_id, kind, params, status, attempts, max_attempts, progress, created_at, started_at, finished_at, run_after, cancel_requested";
    for start in (0..rows).step_by(100_000) {
        let end = (start + 100_000).min(rows) - 1;
        let series = match service.shape {
            Shape::Production => format!("generate_series({start}::bigint, {end}) AS s(i)"),
            Shape::Embedded => "s".to_owned(),
        };
        let with = match service.shape {
            Shape::Production => String::new(),
            Shape::Embedded => format!(
                "WITH RECURSIVE s(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM s WHERE i < {end})"
            ),
        };
        let sql = format!(
            "BEGIN;
             {with} INSERT INTO jobs ({columns}) SELECT {values} FROM {series};
             {with} INSERT INTO job_results (job_id, body) SELECT {id}, '{{}}' FROM {series};
             COMMIT;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await?;
    }
    if service.shape == Shape::Production {
        sqlx::raw_sql("ANALYZE jobs").execute(&pool).await?;
    }
    pool.close().await;
    Ok(())
}

/// Finished jobs the pruner has yet to delete (finished before 2000).
async fn old_jobs(shape: Shape, pool: &AnyPool) -> Result<i64> {
    let sql = format!(
        "SELECT COUNT(*) AS n FROM jobs
         WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at < {}",
        shape.moment("946684800000")
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_one(pool)
        .await?;
    Ok(row.try_get("n")?)
}

/// Scenario 6: submit latency at a fixed rate while the retention pruner
/// works through `rows` jobs that finished long ago, against the same rate
/// on a service holding as many finished jobs that are all within the
/// retention (nothing to prune). Two services, so that the table sizes
/// match and only the pruning differs.
async fn prune(shape: Shape, args: &Args) -> Result<Value> {
    let idle = {
        let service = Service::start(shape, args).await?;
        prefill_jobs(&service, args.rows, chrono::Utc::now().timestamp_millis()).await?;
        let result = submit_only(&service, args.prune_rate, args.submit_secs).await?;
        service.stop().await?;
        result
    };
    let service = Service::start(shape, args).await?;
    // Finished in 1970: all of them are past any retention. The pruner
    // starts on them while they are written.
    prefill_jobs(&service, args.rows, 0).await?;
    let pool = service.pool().await?;
    // The pruner looks every few seconds when idle: measure once it works.
    let waited = Instant::now();
    while old_jobs(shape, &pool).await? >= args.rows {
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(30),
            "the pruner did not start within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = old_jobs(shape, &pool).await?;
    let busy = submit_only(&service, args.prune_rate, args.submit_secs).await?;
    let after = old_jobs(shape, &pool).await?;
    pool.close().await;
    service.stop().await?;
    anyhow::ensure!(
        after > 0,
        "the pruner finished its backlog before the measurement ended: write more rows (--rows)"
    );
    let ratio =
        |p: &str| busy[p].as_f64().unwrap_or(f64::NAN) / idle[p].as_f64().unwrap_or(f64::NAN);
    Ok(json!({
        "rows": args.rows, "rate": args.prune_rate, "secs": args.submit_secs,
        "idle": idle, "pruning": busy,
        "pruned_during": before - after, "pruned_per_s": (before - after) as f64 / args.submit_secs as f64,
        "left_after": after, "p99_ratio": ratio("p99_ms"), "p50_ratio": ratio("p50_ms"),
    }))
}

/// Scenario 5: gst-summary over a month of `rows` entries, against the same
/// aggregate as one plain SQL query (the floor).
/// Scenario dashboard: `rows` final jobs of the bench tenant (of three
/// kinds and statuses, finished over the last hour, so that the chart has
/// every minute to show) written straight into `jobs`, then the overview
/// (`GET /dashboard/overview`, what an open page asks every 5 s) timed
/// over HTTP, one request after another.
async fn dashboard(service: &Service, rows: i64, requests: usize) -> Result<Value> {
    let pool = service.pool().await?;
    let id = match service.shape {
        Shape::Production => "'job_00000000' || lpad(i::text, 24, '0')",
        Shape::Embedded => "'job_00000000' || substr('000000000000000000000000' || i, -24, 24)",
    };
    let now = chrono::Utc::now().timestamp_millis();
    let shape = service.shape;
    let values = format!(
        "{id}, 'bench', CASE i % 3 WHEN 0 THEN 'sleep' WHEN 1 THEN 'gst-summary' ELSE 'ledger-export' END,
         '{{}}', CASE i % 7 WHEN 0 THEN 'FAILED' WHEN 1 THEN 'CANCELLED' ELSE 'SUCCEEDED' END,
         1, 5, 1.0, {at}, {at}, {at}, {zero}, {no}",
        at = shape.moment(&format!("{now} - i % 3600000")),
        zero = shape.moment("0"),
        no = shape.flag("1 = 0"),
    );
    let columns = "job_id, tenant_id, kind, params, status, attempts, max_attempts, progress, created_at, started_at, finished_at, run_after, cancel_requested";
    let filling = Instant::now();
    for start in (0..rows).step_by(100_000) {
        let end = (start + 100_000).min(rows) - 1;
        let sql = match service.shape {
            Shape::Production => format!(
                "INSERT INTO jobs ({columns}) SELECT {values}
                 FROM generate_series({start}::bigint, {end}) AS s(i)"
            ),
            Shape::Embedded => format!(
                "WITH RECURSIVE s(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM s WHERE i < {end})
                 INSERT INTO jobs ({columns}) SELECT {values} FROM s"
            ),
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await?;
    }
    let fill_s = filling.elapsed().as_secs_f64();
    // The lease sweeper folds the counters' deltas every few seconds: time
    // the page as it runs, once the fill is folded.
    let folding = Instant::now();
    if service.shape == Shape::Production {
        sqlx::raw_sql("ANALYZE jobs").execute(&pool).await?;
        loop {
            let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM job_count_deltas")
                .fetch_one(&pool)
                .await?
                .try_get("n")?;
            if left < 1_000 {
                break;
            }
            anyhow::ensure!(
                folding.elapsed() < Duration::from_secs(600),
                "the counters were not folded within 10 min"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let fold_s = folding.elapsed().as_secs_f64();
    pool.close().await;

    // The dashboard is a browser's, signed in with a cookie: a page, not
    // the API, and no part of the client.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed_in = client
        .post(format!("{}/dashboard/sign-in", service.base()))
        .header(reqwest::header::ORIGIN, service.base())
        .form(&[("api_key", KEY)])
        .send()
        .await?;
    let cookie = signed_in
        .headers()
        .get(reqwest::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("no session cookie: {}", signed_in.status()))?
        .to_owned();
    let mut latencies = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let reply = client
            .get(format!("{}/dashboard/overview", service.base()))
            .header(reqwest::header::COOKIE, &cookie)
            .send()
            .await?;
        anyhow::ensure!(reply.status().is_success(), "overview: {}", reply.status());
        let page = reply.text().await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(page.contains("count-succeeded"), "not the overview: {page}");
    }
    latencies.sort_by(f64::total_cmp);
    Ok(json!({
        "rows": rows,
        "fill_s": fill_s,
        "fold_s": fold_s,
        "requests": requests,
        "p50_ms": percentile(&latencies, 0.5),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": latencies.last().copied().unwrap_or(f64::NAN),
    }))
}

async fn report(service: &Service, rows: i64) -> Result<Value> {
    let pool = service.pool().await?;
    let columns = "tenant_id, entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party, description, created_at";
    let shape = service.shape;
    let values = format!(
        "'bench', 'm-' || i, {date},
        CASE WHEN i % 2 = 0 THEN 'sale' ELSE 'purchase' END, (i * 7919) % 10000000,
        CASE i % 7 WHEN 0 THEN 0 WHEN 1 THEN 25 WHEN 2 THEN 300 WHEN 3 THEN 500 WHEN 4 THEN 1200 WHEN 5 THEN 1800 ELSE 2800 END,
        {interstate}, '', '', {zero}",
        date = shape.date("'2026-10-' || CASE WHEN 1 + i % 31 < 10 THEN '0' ELSE '' END || (1 + i % 31)"),
        interstate = shape.flag("i % 3 = 0"),
        zero = shape.moment("0"),
    );
    for start in (0..rows).step_by(100_000) {
        let end = (start + 100_000).min(rows) - 1;
        let sql = match service.shape {
            Shape::Production => format!(
                "INSERT INTO ledger_entries ({columns}) SELECT {values} FROM generate_series({start}::bigint, {end}) AS s(i)"
            ),
            Shape::Embedded => format!(
                "WITH RECURSIVE s(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM s WHERE i < {end})
                 INSERT INTO ledger_entries ({columns}) SELECT {values} FROM s"
            ),
        };
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await?;
    }
    if service.shape == Shape::Production {
        sqlx::raw_sql("VACUUM ANALYZE ledger_entries")
            .execute(&pool)
            .await?;
    }
    // The aggregate the service runs, as one plain statement.
    let interstate = match shape {
        Shape::Production => "interstate",
        Shape::Embedded => "interstate = 1",
    };
    let floor_sql = format!(
        "SELECT direction, rate_centi, CAST(SUM(amount_paise) AS BIGINT),
           CAST(SUM(CASE WHEN {interstate} THEN (amount_paise * rate_centi + 5000) / 10000 ELSE 0 END) AS BIGINT),
           CAST(SUM(CASE WHEN {interstate} THEN 0 ELSE (amount_paise * rate_centi + 10000) / 20000 END) AS BIGINT)
         FROM ledger_entries WHERE tenant_id = 'bench' AND entry_date >= '2026-10-01' AND entry_date <= '2026-10-31'
         GROUP BY direction, rate_centi"
    );
    let mut floors = Vec::new();
    let mut reports = Vec::new();
    let client = &service.client;
    for _ in 0..3 {
        let started = Instant::now();
        sqlx::raw_sql(sqlx::AssertSqlSafe(floor_sql.clone()))
            .execute(&pool)
            .await?;
        floors.push(started.elapsed().as_secs_f64() * 1000.0);

        let october = GstSummary {
            month: "2026-10".into(),
        };
        let job = client.submit(october).await?;
        let done = client.wait(&job.job_id, Duration::from_secs(600)).await?;
        if done.status != JobStatus::Succeeded {
            bail!("gst-summary ended {}", done.status.as_str());
        }
        let took = done
            .started_at
            .as_deref()
            .and_then(|started| millis_between(started, done.finished_at.as_deref()));
        reports.push(took.context("gst-summary without its times")?);
    }
    pool.close().await;
    floors.sort_by(f64::total_cmp);
    reports.sort_by(f64::total_cmp);
    let (floor, run) = (floors[1], reports[1]);
    Ok(json!({"entries": rows, "report_ms": run, "sql_floor_ms": floor, "ratio": run / floor}))
}

/// The workspace this binary was built in (`target/release/` is in it),
/// where the side-by-side scenarios find their scripts.
fn workspace_dir() -> Result<std::path::PathBuf> {
    Ok(std::env::current_exe()?
        .parent()
        .and_then(|p| p.parent())
        .and_then(|p| p.parent())
        .context("workspace")?
        .to_owned())
}

/// The BullMQ side: one run of `scripts/bench-bullmq/bench.mjs`.
fn bullmq(jobs: usize, concurrency: usize) -> Result<f64> {
    let script = workspace_dir()?.join("scripts/bench-bullmq/bench.mjs");
    let output = Command::new("node")
        .arg(&script)
        .arg(format!("--jobs={jobs}"))
        .arg(format!("--concurrency={concurrency}"))
        .arg(format!(
            "--prefix=bench-bullmq-{}",
            uuid::Uuid::now_v7().simple()
        ))
        .stderr(Stdio::inherit())
        .output()
        .context("node (install Node.js; scripts/bench installs bullmq)")?;
    if !output.status.success() {
        bail!("bullmq bench failed");
    }
    let line: Value = serde_json::from_slice(&output.stdout)?;
    line["jobs_per_s"].as_f64().context("jobs_per_s")
}

/// Alternating e2e rounds of Receipt's production shape (`--queue`) and a
/// peer, and their result line.
#[derive(Default)]
struct SideBySide {
    receipt: Vec<Run>,
    peer: Vec<Run>,
}

impl SideBySide {
    /// Receipt's round: a new service, e2e, stopped.
    async fn receipt(&mut self, args: &Args, clients: usize) -> Result<()> {
        let service = Service::start(Shape::Production, args).await?;
        let run = end_to_end(&service.target(), args.jobs, clients).await?;
        service.stop().await?;
        self.receipt.push(run);
        Ok(())
    }

    /// Jobs/s of each side (median and range), CPU per job (median total,
    /// and the last round's parts); the JSON line's fields of the peer
    /// start with `key`, its summary names it `name`.
    fn print(&self, scenario: &str, key: &str, name: &str, args: &Args, clients: usize) {
        let rates = |runs: &[Run]| runs.iter().map(|run| run.jobs_per_s).collect::<Vec<_>>();
        let cpu = |runs: &[Run]| {
            runs.iter()
                .map(|run| run.cpu_ms_per_job.clone())
                .collect::<Vec<_>>()
        };
        let total = |runs: &[Run]| {
            median_and_range(
                runs.iter()
                    .map(|run| run.cpu_ms_per_job["total"].as_f64().unwrap_or(f64::NAN))
                    .collect(),
            )
        };
        let (r, r_lo, r_hi) = median_and_range(rates(&self.receipt));
        let (p, p_lo, p_hi) = median_and_range(rates(&self.peer));
        let ((rc, _, _), (pc, _, _)) = (total(&self.receipt), total(&self.peer));
        let last = |runs: &[Run]| {
            runs.last()
                .map(|run| cpu_summary(&run.cpu_ms_per_job))
                .unwrap_or_default()
        };
        let label = Shape::Production.label(args.queue);
        let mut line = json!({"jobs": args.jobs, "clients": clients, "workers": args.workers, "concurrency": args.concurrency,
               "receipt_jobs_per_s": rates(&self.receipt), "receipt_median": r,
               "receipt_cpu_ms_per_job": cpu(&self.receipt), "ratio": r / p, "cpu_ratio": rc / pc});
        line[format!("{key}_jobs_per_s")] = json!(rates(&self.peer));
        line[format!("{key}_median")] = json!(p);
        line[format!("{key}_cpu_ms_per_job")] = json!(cpu(&self.peer));
        print_result(
            scenario,
            label,
            line,
            &format!(
                "Receipt ({label}) {r:.0} ({r_lo:.0}-{r_hi:.0}) vs {name} {p:.0} ({p_lo:.0}-{p_hi:.0}) jobs/s: ratio {:.2}\n{:>25}CPU ms per job (median total), Receipt {rc:.2} vs {name} {pc:.2}; last round: {} | {}",
                r / p,
                "",
                last(&self.receipt),
                last(&self.peer),
            ),
        );
    }
}

/// The offered scenario at `rate` (jobs/s, or `max`), its plot written
/// when `--plot-dir` is set; its result line, labelled.
async fn offered_at(target: &Target<'_>, rate: &str, args: &Args) -> Result<Value> {
    let options = offered::Options {
        job_ms: args.job_ms,
        max_in_flight: args.max_in_flight,
        drain_secs: args.drain_secs,
    };
    let (rate, ramp) = if rate == "max" {
        let (rate, steps) = offered::find_max(target, args.ramp_secs, &options).await?;
        println!("# ramp: {rate:.0} jobs/s is the highest rate sustained");
        (rate, Some(steps))
    } else {
        let rate: f64 = rate
            .parse()
            .with_context(|| format!("--rates: {rate:?} is neither a number nor `max`"))?;
        (rate, None)
    };
    let run = offered::run(target, rate, args.offered_secs, &options).await?;
    let mut line = run.line;
    line["scenario"] = json!("offered");
    line["shape"] = json!(target.label);
    if let Some(steps) = ramp {
        line["ramp"] = json!(steps);
    }
    if let Some(dir) = &args.plot_dir {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(
            "offered-{}-{rate:.0}-{}.svg",
            target.label,
            target.layout()
        ));
        let title = format!(
            "{} ({} slots as {}), {rate:.0} sleep jobs/s of {} ms for {} s",
            target.label,
            target.slots,
            target.layout(),
            args.job_ms,
            args.offered_secs
        );
        plot::offered_svg(&path, &title, &run.seconds, &run.depth, target.slots)?;
        println!("# plot: {}", path.display());
        line["plot"] = json!(path.display().to_string());
    }
    Ok(line)
}

/// The offered scenario's lines of the table, then its JSON line.
fn print_offered(line: &Value) {
    let f = |key: &str| line[key].as_f64().unwrap_or(f64::NAN);
    // A null percentile is one that fell among unfinished jobs.
    let ms = |key: &str| {
        line[key]
            .as_f64()
            .map_or_else(|| "unfinished".to_owned(), |v| format!("{v:.1}"))
    };
    let shape = line["shape"].as_str().unwrap_or_default();
    println!(
        "{:<9} {shape:<11} {:.0}/s for {:.0} s, {} slots ({}): sent {:.0}/s, unsent {} (in flight at the bound {}), late {}, errors {}; completed {:.1}/s, unfinished {}",
        "offered",
        f("rate"),
        f("secs"),
        line["slots"],
        line["layout"].as_str().unwrap_or_default(),
        f("sent_per_s"),
        line["unsent"],
        line["max_in_flight"],
        line["late"],
        line["errors"],
        f("completed_per_s"),
        line["unfinished"],
    );
    println!(
        "{:>25}end to end (scheduled submit -> finished_at) p50 {} p99 {} p99.9 {} ms; pickup (created -> started) p99 {} ms; submit p99 {} ms",
        "",
        ms("end_to_end_p50_ms"),
        ms("end_to_end_p99_ms"),
        ms("end_to_end_p999_ms"),
        ms("pickup_p99_ms"),
        ms("submit_p99_ms"),
    );
    println!(
        "{:>25}each second: QUEUED mean {:.1} max {}, RUNNING (busy slots) mean {:.1} max {} of {}; CPU ms per job: {}",
        "",
        f("queued_mean"),
        line["queued_max"],
        f("running_mean"),
        line["running_max"],
        line["slots"],
        cpu_summary(&line["cpu_ms_per_job"]),
    );
    println!("{line}");
}

fn median_and_range(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let wants = |s: &str| args.scenarios.split(',').any(|x| x.trim() == s);
    let shapes: Vec<Shape> = match args.shape.as_str() {
        "embedded" => vec![Shape::Embedded],
        "production" => vec![Shape::Production],
        _ => vec![Shape::Embedded, Shape::Production],
    };
    println!("# receipt-bench {:?}", args);
    for &shape in &shapes {
        if wants("e2e") {
            let service = Service::start(shape, &args).await?;
            let clients = args.clients.unwrap_or(args.concurrency);
            let run = end_to_end(&service.target(), args.jobs, clients).await?;
            let rss = service.peak_rss();
            let (label, slots) = (service.label(), service.slots);
            service.stop().await?;
            let rate = run.jobs_per_s;
            let cpu = run.cpu_ms_per_job;
            print_result(
                "e2e",
                label,
                json!({"jobs": args.jobs, "clients": clients, "workers": args.workers, "concurrency": args.concurrency, "slots": slots,
                       "jobs_per_s": rate, "peak_rss": rss, "cpu_ms_per_job": cpu}),
                &format!(
                    "{rate:>8.0} jobs/s   peak RSS {rss}\n{:>25}CPU ms per job: {}",
                    "",
                    cpu_summary(&cpu)
                ),
            );
        }
        if wants("external") {
            let service = Service::start(shape, &args).await?;
            let result = external::external(&service, &args).await?;
            let label = service.label();
            service.stop().await?;
            let summary = external::summary(&result);
            print_result("external", label, result, &summary);
        }
        if wants("backlog") {
            let mut service = Service::start(shape, &args).await?;
            let result = backlog::backlog(&mut service, &args).await?;
            let label = service.label();
            service.stop().await?;
            let summary = backlog::summary(&result);
            print_result("backlog", label, result, &summary);
        }
        if wants("offered") {
            for rate in args.rates.split(',').map(str::trim) {
                let service = Service::start(shape, &args).await?;
                let target = service.target();
                let result = offered_at(&target, rate, &args).await?;
                drop(target);
                service.stop().await?;
                print_offered(&result);
            }
        }
        if wants("submit") {
            let service = Service::start(shape, &args).await?;
            let result = submit_only(&service, args.rate, args.submit_secs).await?;
            service.stop().await?;
            let summary = format!(
                "{:>8.0} req/s   p50 {:.1} ms  p99 {:.1} ms  p99.9 {:.1} ms  errors {}",
                result["achieved_per_s"].as_f64().unwrap_or_default(),
                result["p50_ms"].as_f64().unwrap_or_default(),
                result["p99_ms"].as_f64().unwrap_or_default(),
                result["p999_ms"].as_f64().unwrap_or_default(),
                result["errors"]
            );
            print_result("submit", shape.label(args.queue), result, &summary);
        }
        if wants("pickup") {
            let service = Service::start(shape, &args).await?;
            let result = pickup(&service, args.pickup_jobs).await?;
            service.stop().await?;
            let summary = format!(
                "pickup p50 {:.1} ms  p99 {:.1} ms",
                result["p50_ms"].as_f64().unwrap_or_default(),
                result["p99_ms"].as_f64().unwrap_or_default()
            );
            print_result("pickup", shape.label(args.queue), result, &summary);
        }
        if wants("fairness") {
            // Two slots, as a small deployment has: a FIFO queue would make
            // the second tenant wait for the whole backlog.
            let service = Service::start_with(shape, &args, 2, &[]).await?;
            let result = fairness(&service, args.fairness_backlog, args.fairness_jobs).await?;
            service.stop().await?;
            let summary = format!(
                "pickup of a second tenant p50 {:.1} ms  p99 {:.1} ms  behind {} queued of {}",
                result["p50_ms"].as_f64().unwrap_or_default(),
                result["p99_ms"].as_f64().unwrap_or_default(),
                result["backlog_still_queued"],
                result["backlog"],
            );
            print_result("fairness", shape.label(args.queue), result, &summary);
        }
        if wants("scale") {
            let service = Service::start(shape, &args).await?;
            let empty = end_to_end(&service.target(), args.jobs, args.concurrency)
                .await?
                .jobs_per_s;
            // Within the retention: the pruner leaves them alone.
            prefill_jobs(&service, args.rows, chrono::Utc::now().timestamp_millis()).await?;
            let full = end_to_end(&service.target(), args.jobs, args.concurrency)
                .await?
                .jobs_per_s;
            service.stop().await?;
            print_result(
                "scale",
                shape.label(args.queue),
                json!({"rows": args.rows, "empty_jobs_per_s": empty, "full_jobs_per_s": full, "share": full / empty}),
                &format!(
                    "{full:>8.0} jobs/s with {} finished jobs = {:.0}% of {empty:.0}",
                    args.rows,
                    100.0 * full / empty
                ),
            );
        }
        if wants("prune") {
            let result = prune(shape, &args).await?;
            let line = |r: &Value| {
                format!(
                    "p50 {:.1} ms  p99 {:.1} ms  p99.9 {:.1} ms  errors {}",
                    r["p50_ms"].as_f64().unwrap_or_default(),
                    r["p99_ms"].as_f64().unwrap_or_default(),
                    r["p999_ms"].as_f64().unwrap_or_default(),
                    r["errors"]
                )
            };
            let summary = format!(
                "submit at {}/s, {} finished jobs: nothing to prune {}\n{:>25}pruning {} ({:.0} jobs/s deleted): p99 {:.2}x idle",
                args.prune_rate,
                args.rows,
                line(&result["idle"]),
                "",
                line(&result["pruning"]),
                result["pruned_per_s"].as_f64().unwrap_or_default(),
                result["p99_ratio"].as_f64().unwrap_or_default(),
            );
            print_result("prune", shape.label(args.queue), result, &summary);
        }
        if wants("dashboard") {
            let service = Service::start(shape, &args).await?;
            let result = dashboard(&service, args.rows, 200).await?;
            service.stop().await?;
            let summary = format!(
                "overview over {} jobs: p50 {:.1} ms p99 {:.1} ms (fill {:.0} s, fold {:.0} s)",
                args.rows,
                result["p50_ms"].as_f64().unwrap_or_default(),
                result["p99_ms"].as_f64().unwrap_or_default(),
                result["fill_s"].as_f64().unwrap_or_default(),
                result["fold_s"].as_f64().unwrap_or_default(),
            );
            print_result("dashboard", shape.label(args.queue), result, &summary);
        }
        if wants("delayed") {
            let service = Service::start(shape, &args).await?;
            let result = delayed(&service, &args).await?;
            service.stop().await?;
            let f = |path: &[&str]| {
                path.iter()
                    .fold(&result, |value, key| &value[*key])
                    .as_f64()
                    .unwrap_or_default()
            };
            let summary = format!(
                "{} delayed jobs: start lateness p50 {:.0} ms p99 {:.0} ms max {:.0} ms, {} early\n{:>25}submit p99 {:.1} ms idle, {:.1} ms with them waiting; pickup p99 {:.1} / {:.1} ms",
                result["delayed_jobs"],
                f(&["lateness_p50_ms"]),
                f(&["lateness_p99_ms"]),
                f(&["lateness_max_ms"]),
                result["early"],
                "",
                f(&["idle", "submit", "p99_ms"]),
                f(&["waiting", "submit", "p99_ms"]),
                f(&["idle", "pickup", "p99_ms"]),
                f(&["waiting", "pickup", "p99_ms"]),
            );
            print_result("delayed", shape.label(args.queue), result, &summary);
        }
        if wants("schedules") {
            let service = Service::start(shape, &args).await?;
            let result = schedules(&service, &args).await?;
            service.stop().await?;
            let f = |key: &str| result[key].as_f64().unwrap_or_default();
            let summary = format!(
                "{} schedules every minute, {} fires: job made p50 {:.0} ms p99 {:.0} ms max {:.0} ms after its fire (negative: before)\n{:>25}started p50 {:.0} ms p99 {:.0} ms max {:.0} ms after it, {} early",
                result["schedules"],
                result["jobs"],
                f("made_p50_ms"),
                f("made_p99_ms"),
                f("made_max_ms"),
                "",
                f("started_p50_ms"),
                f("started_p99_ms"),
                f("started_max_ms"),
                result["started_early"],
            );
            print_result("schedules", shape.label(args.queue), result, &summary);
        }
        if wants("priority") {
            let service = Service::start(shape, &args).await?;
            let result = priority(&service, &args).await?;
            service.stop().await?;
            let summary = format!(
                "pickup of a high job p50 {:.1} ms  p99 {:.1} ms  behind {} queued low jobs of its tenant (of {})",
                result["p50_ms"].as_f64().unwrap_or_default(),
                result["p99_ms"].as_f64().unwrap_or_default(),
                result["backlog_still_queued"],
                result["backlog"],
            );
            print_result("priority", shape.label(args.queue), result, &summary);
        }
        if wants("caps") {
            let cap = args.caps_limit.to_string();
            let service = Service::start_with(
                shape,
                &args,
                args.concurrency,
                &[("MAX_RUNNING_PER_TENANT", cap.as_str())],
            )
            .await?;
            let result = caps(&service, &args).await?;
            service.stop().await?;
            let summary = format!(
                "cap {}: most RUNNING of one tenant ever sampled {} ({} samples, {:.0}% at the cap), {:.0} jobs/s of {:.0} the caps allow",
                result["limit"],
                result["most_running_sampled"],
                result["samples"],
                100.0
                    * result["share_of_samples_at_cap"]
                        .as_f64()
                        .unwrap_or_default(),
                result["jobs_per_s"].as_f64().unwrap_or_default(),
                result["ideal_jobs_per_s"].as_f64().unwrap_or_default(),
            );
            print_result("caps", shape.label(args.queue), result, &summary);
        }
        if wants("report") {
            let service = Service::start(shape, &args).await?;
            let result = report(&service, args.rows).await?;
            service.stop().await?;
            let summary = format!(
                "gst-summary {:.0} ms vs plain SQL {:.0} ms = {:.2}x",
                result["report_ms"].as_f64().unwrap_or_default(),
                result["sql_floor_ms"].as_f64().unwrap_or_default(),
                result["ratio"].as_f64().unwrap_or_default()
            );
            print_result("report", shape.label(args.queue), result, &summary);
        }
    }
    if wants("bullmq") {
        let mut receipt = Vec::new();
        let mut bull = Vec::new();
        // CPU milliseconds per job of each side: Receipt's processes,
        // Postgres and Redis; BullMQ's Node.js process and Redis.
        let mut receipt_cpu = Vec::new();
        let mut bull_cpu = Vec::new();
        let redis = redis_pid().await?;
        for _ in 0..args.rounds {
            let service = Service::start(Shape::Production, &args).await?;
            let run = end_to_end(&service.target(), args.jobs, args.concurrency).await?;
            service.stop().await?;
            receipt.push(run.jobs_per_s);
            receipt_cpu.push(run.cpu_ms_per_job["total"].as_f64().unwrap_or(f64::NAN));
            let (node, redis_before) = (waited_children_cpu_seconds(), cpu_seconds(redis));
            bull.push(bullmq(args.jobs, args.concurrency)?);
            let used = match (
                node,
                waited_children_cpu_seconds(),
                redis_before,
                cpu_seconds(redis),
            ) {
                (Some(a), Some(b), Some(c), Some(d)) => (b - a) + (d - c),
                _ => f64::NAN,
            };
            bull_cpu.push(ms_per_job(used, args.jobs));
        }
        let (r, r_lo, r_hi) = median_and_range(receipt.clone());
        let (b, b_lo, b_hi) = median_and_range(bull.clone());
        let (rc, _, _) = median_and_range(receipt_cpu.clone());
        let (bc, _, _) = median_and_range(bull_cpu.clone());
        print_result(
            "bullmq",
            Shape::Production.label(args.queue),
            json!({"receipt_jobs_per_s": receipt, "bullmq_jobs_per_s": bull, "receipt_median": r, "bullmq_median": b, "ratio": r / b,
                   "receipt_cpu_ms_per_job": receipt_cpu, "bullmq_cpu_ms_per_job": bull_cpu, "cpu_ratio": rc / bc}),
            &format!(
                "Receipt {r:.0} ({r_lo:.0}-{r_hi:.0}) vs BullMQ {b:.0} ({b_lo:.0}-{b_hi:.0}) jobs/s: ratio {:.2}; CPU per job {rc:.2} vs {bc:.2} ms",
                r / b
            ),
        );
    }
    if wants("peer") {
        // Alternating rounds, like the BullMQ side by side: Receipt's
        // production shape (`--queue`), then the usual stack, each e2e.
        let clients = args.clients.unwrap_or(args.concurrency);
        let mut rounds = SideBySide::default();
        for _ in 0..args.rounds {
            rounds.receipt(&args, clients).await?;
            let peer = peer::Peer::start(&args).await?;
            let run = end_to_end(&peer.target(), args.jobs, clients).await?;
            peer.stop();
            rounds.peer.push(run);
        }
        rounds.print("peer", "usual_stack", "the usual stack", &args, clients);
    }
    if wants("graphile") {
        // The same rounds beside graphile-worker: the same jobs, added by
        // as many producers as Receipt has clients, on as many slots.
        let clients = args.clients.unwrap_or(args.concurrency);
        let mut rounds = SideBySide::default();
        for _ in 0..args.rounds {
            rounds.receipt(&args, clients).await?;
            let peer = graphile::Peer::start(&args).await?;
            let run = peer.end_to_end(args.jobs, clients).await?;
            peer.stop();
            rounds.peer.push(run);
        }
        rounds.print(
            "graphile",
            "graphile_worker",
            graphile::LABEL,
            &args,
            clients,
        );
    }
    if wants("peer-offered") {
        for rate in args.rates.split(',').map(str::trim) {
            let service = Service::start(Shape::Production, &args).await?;
            let line = offered_at(&service.target(), rate, &args).await?;
            service.stop().await?;
            print_offered(&line);
            let peer = peer::Peer::start(&args).await?;
            let line = offered_at(&peer.target(), rate, &args).await?;
            peer.stop();
            print_offered(&line);
        }
    }
    Ok(())
}

/// Receipt's settings found in the bench's own environment
/// (`PRIORITY_AGING=1s receipt-bench …`), for the services it starts: they
/// start with a cleared environment otherwise. The settings are those the
/// api's `--help` names. Where the bench sets a setting itself (the keys,
/// the slots), its own value wins; where it chooses (the database, the
/// queue, the addresses), these are not taken.
fn inherited_settings() -> Result<Vec<(String, String)>> {
    const CHOSEN_BY_THE_BENCH: [&str; 7] = [
        "DATABASE_URL",
        "DATABASE_DIRECT_URL",
        "DATABASE_POOLER",
        "REDIS_URL",
        "QUEUE_NAME",
        "BIND_ADDR",
        "METRICS_ADDR",
    ];
    let help = std::process::Command::new(testkit::binary("api")?)
        .arg("--help")
        .env_clear()
        .output()?;
    let help = String::from_utf8_lossy(&help.stdout);
    let names: Vec<&str> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split('=').next())
        .collect();
    Ok(std::env::vars()
        .filter(|(name, _)| {
            names.contains(&name.as_str()) && !CHOSEN_BY_THE_BENCH.contains(&name.as_str())
        })
        .collect())
}
