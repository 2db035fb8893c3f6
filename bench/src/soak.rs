//! `receipt-soak`: the production shape (one api, several workers, Postgres
//! and Redis of the run's own) under a mixed load for a set time, while
//! faults are injected: a worker killed every minute, Redis restarted
//! without its data once, Postgres crashed once; and with `--faults all`
//! also partitions and latency (each process reaches Postgres and Redis
//! through a proxy of its own, `testkit::proxy`), two workers with clocks
//! 90 s ahead and behind (`testkit::clock`), and Redis out of memory. Then
//! it lets everything finish and counts what was lost or done twice, and
//! how long each fault took to recover from. Its clients are Receipt's own
//! (`receipt_client`), which retry through the faults as a user's program
//! would.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use rand::Rng;
use receipt_client::{Client, JobStatus, NewWebhook, RetryPolicy, Submit};
use serde_json::{Value, json};
use sqlx::AnyPool;
use testkit::{
    Announcements, Api, Fault, FaultProxy, Process, TestEnv, peak_rss_mib,
    servers::{PrivatePostgres, PrivateRedis},
};

const KEY: &str = "soak-key-long-enough";

/// Runs Receipt's production shape under load while injecting faults, and
/// reports jobs lost or doubled.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// How long the load and the faults last.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Submits per second.
    #[arg(long, default_value_t = 40)]
    rate: u32,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// How often a worker is killed with SIGKILL (and a new one started).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    kill_every: Duration,
    /// How long to wait, after the load ends, for every job to finish.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// `basic`: workers killed, Redis restarted empty, Postgres crashed.
    /// `all`: those, and partitions, latency, clock skew and Redis out of
    /// memory (see the module's head).
    #[arg(long, value_enum, default_value_t = Faults::Basic)]
    faults: Faults,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Faults {
    Basic,
    All,
}

/// A process's links to Postgres and Redis, each through a proxy that the
/// soak can silence or slow.
struct Links {
    postgres: FaultProxy,
    redis: FaultProxy,
    database_url: String,
    redis_url: String,
}

impl Links {
    async fn to(env: &TestEnv) -> Links {
        let (postgres, database_url) = FaultProxy::in_front_of(&env.database_url).await;
        let (redis, redis_url) = FaultProxy::in_front_of(&env.redis_url).await;
        Links {
            postgres,
            redis,
            database_url,
            redis_url,
        }
    }

    fn settings(&self) -> [(&str, &str); 2] {
        [
            ("DATABASE_URL", self.database_url.as_str()),
            ("REDIS_URL", self.redis_url.as_str()),
        ]
    }
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Idempotency key -> the job id its first 202 named.
    accepted: HashMap<String, String>,
    /// Keys whose re-sent request named another job.
    keys_with_two_jobs: usize,
    /// Tries of a change (a submit, mostly) that failed and that the
    /// client tried again.
    retried_submits: usize,
    long_polls: usize,
}

type Shared = Arc<Mutex<Seen>>;

/// The processes of the run (`testkit`), each logging to a file of its
/// own; killed when dropped.
struct Processes {
    api: Api,
    /// Each worker in its slot: a killed worker's successor takes its slot,
    /// with the slot's links and clock.
    workers: Vec<Process>,
    /// With `--faults all`: each slot's links, and its clock's offset.
    slots: Vec<(Option<Arc<Links>>, i64)>,
    started_workers: usize,
    /// Peak RSS of workers already killed.
    killed_peaks: Vec<f64>,
}

impl Processes {
    fn worker_in(&mut self, env: &TestEnv, slot: usize) -> Process {
        self.started_workers += 1;
        let (links, offset) = &self.slots[slot];
        let mut settings: Vec<(String, String)> = match offset {
            0 => Vec::new(),
            offset => testkit::clock::skewed_by(*offset),
        };
        if let Some(links) = links {
            settings.extend(
                links
                    .settings()
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            );
        }
        env.start_worker_owned(&settings)
    }

    fn start_workers(&mut self, env: &TestEnv) {
        for slot in 0..self.slots.len() {
            let worker = self.worker_in(env, slot);
            self.workers.push(worker);
        }
    }

    fn kill_a_worker(&mut self, env: &TestEnv) {
        if self.workers.is_empty() {
            return;
        }
        let slot = rand::rng().random_range(0..self.workers.len());
        if let Some(peak) = peak_rss_mib(self.workers[slot].pid()) {
            self.killed_peaks.push(peak);
        }
        self.workers[slot].kill_hard();
        self.workers[slot] = self.worker_in(env, slot);
    }

    fn peaks(&self) -> Value {
        let mut workers: Vec<f64> = self.killed_peaks.clone();
        workers.extend(self.workers.iter().filter_map(|w| peak_rss_mib(w.pid())));
        json!({
            "api_mib": peak_rss_mib(self.api.pid()),
            "worker_max_mib": workers.iter().copied().fold(0.0, f64::max),
            "workers_started": self.started_workers,
        })
    }
}

/// One client intent: submit with a key, which the client tries again
/// under the same key after any error that a retry can change; now and
/// then send it once more, as a client that lost the answer would, and
/// check the same job comes back.
async fn submit_intent(client: Client, seen: Shared, key: String) {
    let params = {
        let mut rng = rand::rng();
        match rng.random_range(0..100) {
            0..5 => json!({"ms": rng.random_range(10..200), "fail_times": 1, "permanent": true}),
            5..20 => json!({"ms": rng.random_range(10..200), "fail_times": rng.random_range(1..3)}),
            _ => json!({"ms": rng.random_range(10..500)}),
        }
    };
    let submit = Submit::json("sleep", params).idempotency_key(&key);
    let job_id = match client.submit(submit.clone()).await {
        Ok(job) => job.job_id,
        // A refusal, or no acceptance within the client's deadline.
        Err(error) => {
            eprintln!("submit {key}: {error}");
            return;
        }
    };
    seen.lock()
        .unwrap()
        .accepted
        .insert(key.clone(), job_id.clone());
    if rand::rng().random_ratio(1, 10)
        && let Ok(again) = client.submit(submit).await
        && again.job_id != job_id
    {
        seen.lock().unwrap().keys_with_two_jobs += 1;
    }
}

/// Long polls on jobs already accepted, one after another.
async fn long_poller(client: Client, seen: Shared, until: Instant) {
    while Instant::now() < until {
        let job_id = {
            let seen = seen.lock().unwrap();
            let n = seen.accepted.len();
            (n > 0)
                .then(|| {
                    seen.accepted
                        .values()
                        .nth(rand::rng().random_range(0..n))
                        .cloned()
                })
                .flatten()
        };
        if let Some(job_id) = job_id {
            let asked = Instant::now();
            // Not final within the wait, or no answer through a fault:
            // either way, on to the next job.
            let _ = client.wait(&job_id, Duration::from_secs(5)).await;
            seen.lock().unwrap().long_polls += 1;
            // A job already final answers at once: a client would not ask
            // again straight away.
            if asked.elapsed() < Duration::from_millis(100) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

const TABLES: [&str; 6] = [
    "jobs",
    "job_results",
    "outbox",
    "idempotency_keys",
    "webhook_events",
    "webhook_deliveries",
];

async fn row_counts(pool: &AnyPool) -> Result<Value> {
    let mut counts = serde_json::Map::new();
    for table in TABLES {
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                .fetch_one(pool)
                .await?;
        counts.insert(table.to_owned(), json!(n));
    }
    Ok(Value::Object(counts))
}

async fn redis_size(url: &str) -> Result<Value> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse::<i64>().ok());
    Ok(json!({"keys": keys, "used_memory_bytes": used}))
}

/// Retries a database read through the faults the soak itself causes.
async fn with_retries<T, F: std::future::Future<Output = Result<T>>>(
    mut read: impl FnMut() -> F,
) -> Result<T> {
    let mut last = None;
    for _ in 0..60 {
        match read().await {
            Ok(value) => return Ok(value),
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last.context("no attempt")?)
}

async fn unfinished(pool: &AnyPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status IN ('QUEUED', 'RUNNING')")
            .fetch_one(pool)
            .await?,
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    for binary in ["api", "worker"] {
        testkit::binary(binary).context("scripts/soak builds the release binaries")?;
    }
    sqlx::any::install_default_drivers();
    let postgres = PrivatePostgres::start();
    let mut redis = PrivateRedis::start();
    let logs = tempfile::tempdir()?;
    let keys = format!("soak:{KEY}");
    let env = TestEnv::on_servers(&postgres.admin_url(), &postgres.url(), &redis.url())
        .await
        .settings(&[
            ("EMBEDDED_WORKER", "false"),
            ("API_KEYS", &keys),
            ("ENABLE_DIAGNOSTIC_KINDS", "true"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
            ("WEBHOOK_RETRY_SCHEDULE", "1s,2s,5s,10s"),
            ("RETRY_BASE_DELAY", "200ms"),
            ("RETRY_MAX_DELAY", "2s"),
            ("JOB_LEASE", "10s"),
            ("REPUBLISH_AFTER", "60s"),
            ("RUST_LOG", "warn"),
        ])
        .log_to(logs.path().to_owned());
    let every_fault = args.faults == Faults::All;
    // With every fault, the api and each worker slot reach the servers
    // through links of their own, and two workers' clocks are wrong.
    let api_links = match every_fault {
        true => Some(Arc::new(Links::to(&env).await)),
        false => None,
    };
    let api = match &api_links {
        Some(links) => env.start_api(&links.settings()).await,
        None => env.start_api(&[]).await,
    };
    let base = api.base.clone();
    let mut slots = Vec::new();
    for slot in 0..args.workers {
        let links = match every_fault {
            true => Some(Arc::new(Links::to(&env).await)),
            false => None,
        };
        let offset = match (every_fault, slot) {
            (true, 0) => 90,
            (true, 1) => -90,
            _ => 0,
        };
        slots.push((links, offset));
    }
    let worker_links: Vec<Arc<Links>> = slots.iter().filter_map(|(l, _)| l.clone()).collect();
    let mut processes = Processes {
        api,
        workers: Vec::new(),
        slots,
        started_workers: 0,
        killed_peaks: Vec::new(),
    };
    processes.start_workers(&env);
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(2)
        .connect(&env.database_url)
        .await?;
    env.wait_for_redis_consumers(args.workers).await;
    let rows_before = row_counts(&pool).await?;
    let redis_before = redis_size(&redis.url()).await?;

    let seen: Shared = Arc::default();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    // An intent is tried for two minutes at most, which outlasts every
    // fault the soak makes; the retries are counted.
    let submitter = Client::builder(&base, KEY)
        .http_client(http.clone())
        .retry(RetryPolicy {
            deadline: Duration::from_secs(120),
            try_timeout: Duration::from_secs(10),
            ..RetryPolicy::default()
        })
        .on_try({
            let seen = seen.clone();
            move |report| {
                if report.next_try_in.is_some() {
                    seen.lock().unwrap().retried_submits += 1;
                }
            }
        })
        .build()?;
    let poller = Client::builder(&base, KEY)
        .http_client(http)
        .retry(RetryPolicy {
            deadline: Duration::from_secs(10),
            try_timeout: Duration::from_secs(10),
            ..RetryPolicy::default()
        })
        .build()?;
    // Answers 500 to one delivery in twenty, so retries run.
    let announced = Announcements::failing_every(20);
    submitter
        .register_webhook(&NewWebhook {
            events: Some(
                ["job.succeeded", "job.failed", "job.cancelled"]
                    .map(str::to_owned)
                    .into(),
            ),
            ..NewWebhook::to(&announced.url)
        })
        .await?;

    println!(
        "soak: {:?} at {} submits/s, {} workers; a worker killed every {:?}, Redis restarted empty at 1/3, Postgres crashed at 2/3{}",
        args.duration,
        args.rate,
        args.workers,
        args.kill_every,
        if every_fault {
            "; workers 90 s ahead and behind; partitions, Redis out of memory and latency (--faults all)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let recoveries: Recoveries = Arc::default();
    let prober = Prober {
        submitter: submitter.clone(),
        poller: poller.clone(),
        seen: seen.clone(),
        recoveries: recoveries.clone(),
    };
    let timed = match (&api_links, every_fault) {
        (Some(api_links), true) => Some(tokio::spawn(timed_faults(
            started,
            args.duration,
            api_links.clone(),
            worker_links,
            redis.url(),
            prober.clone(),
        ))),
        _ => None,
    };
    let load_ends = started + args.duration;
    let pollers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(long_poller(poller.clone(), seen.clone(), load_ends)))
        .collect();
    let mut intents = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / args.rate.max(1));
    let (mut next_kill, mut redis_done, mut postgres_done) =
        (started + args.kill_every, false, false);
    let mut faults = Vec::new();
    let mut n = 0u64;
    while Instant::now() < load_ends {
        tick.tick().await;
        n += 1;
        intents.push(tokio::spawn(submit_intent(
            submitter.clone(),
            seen.clone(),
            format!("soak-{n}"),
        )));
        let elapsed = started.elapsed();
        if Instant::now() >= next_kill {
            processes.kill_a_worker(&env);
            faults.push(format!(
                "{:>5.0}s worker killed (SIGKILL)",
                elapsed.as_secs_f64()
            ));
            next_kill += args.kill_every;
        }
        if !redis_done && elapsed >= args.duration / 3 {
            redis_done = true;
            redis.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            redis.start_again();
            faults.push(format!(
                "{:>5.0}s Redis restarted empty (3 s down)",
                elapsed.as_secs_f64()
            ));
            tokio::spawn(prober.clone().probe("Redis restarted empty"));
        }
        if !postgres_done && elapsed >= args.duration * 2 / 3 {
            postgres_done = true;
            postgres.crash();
            tokio::time::sleep(Duration::from_secs(5)).await;
            postgres.start_again();
            faults.push(format!(
                "{:>5.0}s Postgres crashed (5 s down)",
                elapsed.as_secs_f64()
            ));
            tokio::spawn(prober.clone().probe("Postgres crashed"));
        }
    }
    println!(
        "load ended after {:.0} s; {n} intents; waiting for every answer",
        started.elapsed().as_secs_f64()
    );
    if let Some(timed) = timed {
        faults.extend(timed.await.unwrap_or_default());
    }
    for intent in intents {
        let _ = intent.await;
    }
    for poller in pollers {
        let _ = poller.await;
    }
    let drain_ends = Instant::now() + args.drain;
    loop {
        let left = with_retries(|| unfinished(&pool)).await?;
        if left == 0 || Instant::now() >= drain_ends {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Webhook deliveries still due (a receiver's 500 is retried).
    loop {
        let pending: i64 = with_retries(|| async {
            Ok(
                sqlx::query_scalar("SELECT COUNT(*) FROM webhook_events WHERE state = 'pending'")
                    .fetch_one(&pool)
                    .await?,
            )
        })
        .await?;
        if pending == 0 || Instant::now() >= drain_ends {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let report = report(
        &pool,
        &seen,
        &announced,
        &processes,
        &redis.url(),
        rows_before,
        redis_before,
        &faults,
        &recoveries,
        started,
    )
    .await?;
    println!(
        "\naccepted {}, finished {}, lost {}, doubled {}; rows after: {}; Redis keys {} -> {} (a minute later {}); peak RSS {}",
        report["accepted"],
        report["finished"],
        report["lost"],
        report["doubled"],
        report["rows_after"],
        report["redis_before"]["keys"],
        report["redis_after"]["keys"],
        report["redis_a_minute_later"]["keys"],
        report["peak_rss"],
    );
    println!("{report}");
    announced.stop().await;
    drop(processes);
    pool.close().await;
    let lost = report["lost"].as_i64().unwrap_or(-1);
    let doubled = report["doubled"].as_i64().unwrap_or(-1);
    if lost != 0 || doubled != 0 {
        bail!("lost {lost}, doubled {doubled}: see {}", keep_logs(logs));
    }
    Ok(())
}

fn keep_logs(logs: tempfile::TempDir) -> String {
    let path: &Path = logs.path();
    let shown = path.display().to_string();
    std::mem::forget(logs);
    shown
}

#[allow(clippy::too_many_arguments)]
async fn report(
    pool: &AnyPool,
    seen: &Shared,
    announced: &Announcements,
    processes: &Processes,
    redis_url: &str,
    rows_before: Value,
    redis_before: Value,
    faults: &[String],
    recoveries: &Recoveries,
    started: Instant,
) -> Result<Value> {
    let (accepted, keys_with_two_jobs, retried, long_polls) = {
        let seen = seen.lock().unwrap();
        (
            seen.accepted.clone(),
            seen.keys_with_two_jobs,
            seen.retried_submits,
            seen.long_polls,
        )
    };
    // Each job's distinct success events (a retried delivery is one).
    let deliveries = announced.all();
    let mut success_events: HashMap<&str, HashSet<&str>> = HashMap::new();
    for delivery in deliveries
        .iter()
        .filter(|d| d.event_type == "job.succeeded")
    {
        success_events
            .entry(&delivery.job_id)
            .or_default()
            .insert(&delivery.event_id);
    }
    let success_doubled = success_events.values().filter(|ids| ids.len() > 1).count();
    let deliveries = deliveries.len();
    let mut by_status: HashMap<String, i64> = HashMap::new();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, COUNT(*) FROM jobs GROUP BY status")
            .fetch_all(pool)
            .await?;
    for (status, count) in rows {
        by_status.insert(status, count);
    }
    let final_statuses: i64 = ["SUCCEEDED", "FAILED", "CANCELLED"]
        .iter()
        .map(|s| by_status.get(*s).copied().unwrap_or(0))
        .sum();
    let jobs_in_db: i64 = by_status.values().sum();
    let accepted_jobs: HashSet<&String> = accepted.values().collect();
    let mut finished_accepted = 0i64;
    for job_id in &accepted_jobs {
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM jobs WHERE job_id = $1")
                .bind(job_id.as_str())
                .fetch_optional(pool)
                .await?;
        if matches!(
            status.as_deref(),
            Some("SUCCEEDED" | "FAILED" | "CANCELLED")
        ) {
            finished_accepted += 1;
        }
    }
    let lost = accepted.len() as i64 - finished_accepted;
    // Jobs beyond one per accepted key, keys that named two jobs, and jobs
    // announced as succeeded twice (two events, not two deliveries of one).
    let extra_jobs = (jobs_in_db - accepted_jobs.len() as i64).max(0);
    let doubled = extra_jobs + keys_with_two_jobs as i64 + success_doubled as i64;
    println!("\nfaults:");
    for fault in faults {
        println!("  {fault}");
    }
    let recoveries = recoveries.lock().unwrap().clone();
    println!("recovery (from a fault's end to a new job's success):");
    for (fault, took) in &recoveries {
        match took {
            Some(took) => println!("  {fault}: {:.1} s", took.as_secs_f64()),
            None => println!("  {fault}: NOT RECOVERED"),
        }
    }
    let worst_recovery = recoveries
        .iter()
        .map(|(_, took)| took.map_or(f64::INFINITY, |took| took.as_secs_f64()))
        .fold(0.0, f64::max);
    let recoveries: Vec<Value> = recoveries
        .iter()
        .map(|(fault, took)| json!({"fault": fault, "seconds": took.map(|t| t.as_secs_f64())}))
        .collect();
    let rows_after = row_counts(pool).await?;
    let redis_after = redis_size(redis_url).await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let redis_a_minute_later = redis_size(redis_url).await?;
    Ok(json!({
        "scenario": "soak",
        "seconds": started.elapsed().as_secs(),
        "accepted": accepted.len(),
        "finished": finished_accepted,
        "final_in_db": final_statuses,
        "by_status": by_status,
        "lost": lost,
        "doubled": doubled,
        "doubled_detail": {"extra_jobs": extra_jobs, "keys_with_two_jobs": keys_with_two_jobs, "jobs_with_two_success_events": success_doubled},
        "retried_submits": retried,
        "webhook_deliveries_received": deliveries,
        "long_polls": long_polls,
        "rows_before": rows_before,
        "rows_after": rows_after,
        "redis_before": redis_before,
        "redis_after": redis_after,
        "redis_a_minute_later": redis_a_minute_later,
        "peak_rss": processes.peaks(),
        "recoveries": recoveries,
        "worst_recovery_s": worst_recovery,
    }))
}

/// Each fault's recovery: from its end to the success of a job submitted
/// then; `None` if that job did not succeed within five minutes.
type Recoveries = Arc<Mutex<Vec<(String, Option<Duration>)>>>;

/// Measures recoveries, with the run's clients.
#[derive(Clone)]
struct Prober {
    submitter: Client,
    poller: Client,
    seen: Shared,
    recoveries: Recoveries,
}

impl Prober {
    /// Submits a job as `fault` ends and records how long until it
    /// SUCCEEDED. The job counts among those accepted.
    async fn probe(self, fault: &'static str) {
        let ended = Instant::now();
        let key = format!("probe-{}", fault.replace(' ', "-"));
        let submit = Submit::json("sleep", json!({"ms": 1})).idempotency_key(&key);
        let recovered = async {
            let job = self.submitter.submit(submit).await.ok()?;
            self.seen
                .lock()
                .unwrap()
                .accepted
                .insert(key.clone(), job.job_id.clone());
            while ended.elapsed() < Duration::from_secs(300) {
                match self.poller.wait(&job.job_id, Duration::from_secs(30)).await {
                    Ok(job) if job.status == JobStatus::Succeeded => return Some(ended.elapsed()),
                    Ok(_) => return None,
                    Err(_) => {}
                }
            }
            None
        }
        .await;
        self.recoveries
            .lock()
            .unwrap()
            .push((fault.to_owned(), recovered));
    }
}

/// The faults of `--faults all` that last a while, at set points of the
/// run (the first at a tenth of it), each followed by a recovery probe;
/// answers what it did, as the report lists faults.
async fn timed_faults(
    started: Instant,
    duration: Duration,
    api: Arc<Links>,
    workers: Vec<Arc<Links>>,
    redis_url: String,
    prober: Prober,
) -> Vec<String> {
    let mut said = Vec::new();
    let at = |fraction: f64| tokio::time::Instant::from_std(started + duration.mul_f64(fraction));
    let mut note = |what: &str| {
        said.push(format!("{:>5.0}s {what}", started.elapsed().as_secs_f64()));
    };

    tokio::time::sleep_until(at(0.10)).await;
    workers[0].postgres.set(Fault::Blackhole);
    tokio::time::sleep(Duration::from_secs(30)).await;
    workers[0].postgres.heal();
    note("a worker (90 s ahead) cut off from Postgres for 30 s");
    tokio::spawn(prober.clone().probe("a worker cut off from Postgres"));

    tokio::time::sleep_until(at(0.25)).await;
    api.postgres.set(Fault::Blackhole);
    tokio::time::sleep(Duration::from_secs(10)).await;
    api.postgres.heal();
    note("the api cut off from Postgres for 10 s");
    tokio::spawn(prober.clone().probe("the api cut off from Postgres"));

    tokio::time::sleep_until(at(0.45)).await;
    let worker = workers.get(1).unwrap_or(&workers[0]);
    worker.redis.set(Fault::Blackhole);
    tokio::time::sleep(Duration::from_secs(20)).await;
    worker.redis.heal();
    note("a worker (90 s behind) cut off from Redis for 20 s");
    tokio::spawn(prober.clone().probe("a worker cut off from Redis"));

    tokio::time::sleep_until(at(0.55)).await;
    match redis_out_of_memory(&redis_url, Duration::from_secs(20)).await {
        Ok(()) => {
            note("Redis out of memory (noeviction, held over maxmemory) for 20 s");
            tokio::spawn(prober.clone().probe("Redis out of memory"));
        }
        Err(error) => note(&format!("Redis out of memory: not made ({error})")),
    }

    tokio::time::sleep_until(at(0.80)).await;
    let links = std::iter::once(&api).chain(&workers);
    let slow = Fault::Latency {
        ms: 200,
        jitter_ms: 100,
    };
    for link in links.clone() {
        link.postgres.set(slow);
        link.redis.set(slow);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    for link in links {
        link.postgres.heal();
        link.redis.heal();
    }
    note("200 ms (up to 100 ms more) on every link for 60 s");
    prober.probe("latency on every link").await;
    said
}

/// Holds Redis over its `maxmemory` (with `noeviction`) for `how_long`.
async fn redis_out_of_memory(url: &str, how_long: Duration) -> Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory")?;
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory-policy", "noeviction"][..])
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg((used / 2).max(1).to_string())
        .query_async(&mut conn)
        .await?;
    tokio::time::sleep(how_long).await;
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"][..])
        .query_async(&mut conn)
        .await?;
    Ok(())
}
