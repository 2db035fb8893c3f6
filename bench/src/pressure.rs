//! Receipt under Postgres pressure: the production shape (`api` and one
//! `worker` on a Postgres and a Redis of this run's own) at a steady rate
//! of 1 ms jobs, through three faults, each in a service of its own:
//!
//! - `held`: a transaction held idle (`BEGIN; SELECT txid_current();`),
//!   which keeps vacuum from reclaiming anything while it lasts;
//! - `terminate`: `pg_terminate_backend` of Receipt's connections five
//!   times a second;
//! - `exhaust`: another client holding every connection Postgres allows.
//!
//! Each prints, per phase (before, during, after), the submit latency from
//! each request's scheduled time, the pickup latency (`started_at -
//! created_at`), the answers by status, and the jobs completed per second;
//! `held` adds the dead tuples of the queue tables over time. At the end
//! every accepted job must have SUCCEEDED; second attempts are counted.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use receipt_client::{Client, RetryPolicy};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use testkit::{
    Api, Process, TestEnv,
    servers::{PrivatePostgres, PrivateRedis, take_every_free_connection, terminate_connections},
};
use tokio::time::Instant;

mod stats;
use stats::percentile;

const KEY: &str = "pressure-key-0123456789abcdef";

#[derive(Parser, Debug, Clone)]
#[command(about = "Receipt under Postgres pressure (see docs/benchmarks.md)")]
struct Args {
    /// Scenarios, comma-separated: held, terminate, exhaust.
    #[arg(long, default_value = "held,terminate,exhaust")]
    scenarios: String,
    /// Jobs offered per second, open loop.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Milliseconds each job sleeps.
    #[arg(long, default_value_t = 1)]
    job_ms: u64,
    /// The worker's slots.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of steady load before the fault.
    #[arg(long, default_value_t = 60)]
    before_secs: u64,
    /// Seconds the idle transaction is held.
    #[arg(long, default_value_t = 300)]
    held_secs: u64,
    /// Seconds the connections are cut, or held by another client.
    #[arg(long, default_value_t = 60)]
    fault_secs: u64,
    /// Seconds of steady load after the fault.
    #[arg(long, default_value_t = 120)]
    after_secs: u64,
    /// `max_connections` of the run's Postgres.
    #[arg(long, default_value_t = 100)]
    max_connections: u32,
}

/// The production shape on servers of its own.
struct Service {
    api: Api,
    /// A client of the api that sends each request once, so that every
    /// answer, refusals and outages included, is counted as it came.
    client: Client,
    worker: Process,
    env: TestEnv,
    // Dropped after the processes (fields drop in order).
    _redis: PrivateRedis,
    postgres: PrivatePostgres,
}

impl Service {
    async fn start(args: &Args) -> Result<Self> {
        for binary in ["api", "worker"] {
            testkit::binary(binary).context("scripts/pressure builds the release binaries")?;
        }
        // pg_stat_statements says where the database's time goes, phase by phase.
        let postgres = PrivatePostgres::start_with(
            args.max_connections,
            &["shared_preload_libraries=pg_stat_statements"],
        );
        let redis = PrivateRedis::start();
        let keys = format!("pressure:{KEY}");
        let concurrency = args.concurrency.to_string();
        let env = TestEnv::on_servers(&postgres.admin_url(), &postgres.url(), &redis.url())
            .await
            .settings(&[
                ("API_KEYS", keys.as_str()),
                ("ENABLE_DIAGNOSTIC_KINDS", "true"),
                ("WORKER_CONCURRENCY", concurrency.as_str()),
                // What a deployment runs with, not the tests' quick ones.
                ("JOB_LEASE", "30s"),
                ("RETRY_BASE_DELAY", "1s"),
                ("RETRY_MAX_DELAY", "60s"),
                ("SHUTDOWN_GRACE", "10s"),
                ("EMBEDDED_WORKER", "false"),
                ("RUST_LOG", "error"),
            ]);
        let api = env.start_api(&[]).await;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let client = Client::builder(&api.base, KEY)
            .http_client(http)
            .retry(RetryPolicy {
                try_timeout: Duration::from_secs(30),
                ..RetryPolicy::single_try()
            })
            .build()?;
        let worker = env.start_worker(&[]);
        env.wait_for_redis_consumers(1).await;
        let service = Service {
            api,
            client,
            worker,
            env,
            _redis: redis,
            postgres,
        };
        // Planner statistics for tables of a running service, as its
        // first minute's traffic and autovacuum give it.
        let load = Load::start(&service.client, args.rate, args.job_ms);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (_, warm_up) = load.stop().await;
        let accepted = warm_up.iter().filter(|s| s.status == 202).count();
        ensure!(
            accepted * 2 > warm_up.len(),
            "{accepted} of {} warm-up submits accepted: {:?}",
            warm_up.len(),
            warm_up.iter().find(|s| s.status != 202).map(|s| s.status)
        );
        service.execute("ANALYZE").await?;
        service
            .execute("CREATE EXTENSION pg_stat_statements")
            .await?;
        Ok(service)
    }

    async fn connect(&self) -> Result<PgConnection> {
        Ok(PgConnection::connect(&self.env.database_url).await?)
    }

    async fn execute(&self, sql: &str) -> Result<()> {
        let mut conn = self.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    fn database(&self) -> &str {
        &self.env.queue_name
    }

    fn processes_up(&self) -> bool {
        self.worker.exited().is_none()
            && self
                .api
                .process
                .as_ref()
                .is_some_and(|p| p.exited().is_none())
    }
}

/// One submit: when it was due (seconds since the load began), how long
/// its answer took from then, and what it was.
struct Submit {
    due: f64,
    ms: f64,
    /// The HTTP status (202 for a job accepted), or 0 for no answer at
    /// all, or one the client could not read.
    status: u16,
    retry_after: bool,
    job_id: Option<String>,
}

/// Submits at a fixed rate until stopped; latency is measured from each
/// request's scheduled time, so a stall counts against every request it
/// delays.
struct Load {
    started: Instant,
    started_at: chrono::DateTime<chrono::Utc>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Submit>>,
}

impl Load {
    fn start(client: &Client, rate: u64, job_ms: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let started_at = chrono::Utc::now();
        let client = client.clone();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut submits = Vec::new();
                let mut i = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
                    i += 1;
                    tokio::time::sleep_until(due).await;
                    let client = client.clone();
                    submits.push(tokio::spawn(async move {
                        submit_once(&client, job_ms, (due - started).as_secs_f64(), due).await
                    }));
                }
                let mut done = Vec::with_capacity(submits.len());
                for submit in submits {
                    done.push(submit.await.expect("a submit task"));
                }
                done
            }
        });
        Load {
            started,
            started_at,
            stop,
            task,
        }
    }

    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    async fn stop(self) -> (chrono::DateTime<chrono::Utc>, Vec<Submit>) {
        self.stop.store(true, Ordering::Relaxed);
        (self.started_at, self.task.await.expect("the load"))
    }
}

async fn submit_once(client: &Client, job_ms: u64, due_s: f64, due: Instant) -> Submit {
    let sleep = receipt_client::Submit::json("sleep", json!({ "ms": job_ms }));
    let answer = client.submit(sleep).await;
    let ms = due.elapsed().as_secs_f64() * 1000.0;
    let (status, retry_after, job_id) = match answer {
        Ok(job) => (202, false, Some(job.job_id)),
        Err(receipt_client::Error::Api {
            problem,
            retry_after,
        }) => (problem.status, retry_after.is_some(), None),
        Err(_) => (0, false, None),
    };
    Submit {
        due: due_s,
        ms,
        status,
        retry_after,
        job_id,
    }
}

/// A job as the database ended it, its times in seconds since the load
/// began.
struct Finished {
    created: f64,
    started: Option<f64>,
    finished: Option<f64>,
    succeeded: bool,
    attempts: i32,
}

type Moment = chrono::DateTime<chrono::Utc>;
/// A job's id, created, started and finished times, status and attempts.
type JobTimes = (String, Moment, Option<Moment>, Option<Moment>, String, i32);
/// A job's status, attempts, hand-backs, error type and message.
type JobState = (String, i64, i64, Option<String>, Option<String>);

async fn jobs_of(
    service: &Service,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<std::collections::HashMap<String, Finished>> {
    let mut conn = service.connect().await?;
    let rows: Vec<JobTimes> = sqlx::query_as(
        "SELECT job_id, created_at, started_at, finished_at, status, attempts::int4 \
         FROM jobs WHERE created_at >= $1",
    )
    .bind(since)
    .fetch_all(&mut conn)
    .await?;
    let s = |t: chrono::DateTime<chrono::Utc>| (t - since).as_seconds_f64();
    Ok(rows
        .into_iter()
        .map(|(id, created, started, finished, status, attempts)| {
            (
                id,
                Finished {
                    created: s(created),
                    started: started.map(s),
                    finished: finished.map(s),
                    succeeded: status == "SUCCEEDED",
                    attempts,
                },
            )
        })
        .collect())
}

fn quantiles(mut values: Vec<f64>) -> Value {
    values.sort_by(f64::total_cmp);
    let round = |v: f64| (v * 10.0).round() / 10.0;
    json!({
        "n": values.len(),
        "p50": round(percentile(&values, 0.5)),
        "p95": round(percentile(&values, 0.95)),
        "p99": round(percentile(&values, 0.99)),
        "max": round(percentile(&values, 1.0)),
    })
}

/// The figures of one phase: the submits due, and the jobs created, in
/// `[from, to)` seconds since the load began.
fn phase(
    name: &str,
    (from, to): (f64, f64),
    submits: &[Submit],
    jobs: &std::collections::HashMap<String, Finished>,
) -> Value {
    let due: Vec<&Submit> = submits
        .iter()
        .filter(|s| s.due >= from && s.due < to)
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for s in &due {
        let key = match s.status {
            0 => "no_answer".to_owned(),
            503 if s.retry_after => "503_retry_after".to_owned(),
            status => status.to_string(),
        };
        *statuses.entry(key).or_default() += 1;
    }
    let accepted: Vec<f64> = due
        .iter()
        .filter(|s| s.status == 202)
        .map(|s| s.ms)
        .collect();
    let pickup: Vec<f64> = jobs
        .values()
        .filter(|j| j.created >= from && j.created < to)
        .filter_map(|j| j.started.map(|s| (s - j.created) * 1000.0))
        .collect();
    let completed = jobs
        .values()
        .filter(|j| j.finished.is_some_and(|f| f >= from && f < to))
        .count();
    json!({
        "phase": name,
        "secs": to - from,
        "answers": statuses,
        "submit_ms": quantiles(accepted),
        "pickup_ms": quantiles(pickup),
        "completed_per_s": ((completed as f64 / (to - from)) * 10.0).round() / 10.0,
    })
}

fn summary_line(phase: &Value) -> String {
    let q = |v: &Value| format!("p50/p95/p99 {}/{}/{} ms", v["p50"], v["p95"], v["p99"]);
    format!(
        "  {:<7} submit {}  pickup {}  completed {}/s  answers {}",
        phase["phase"].as_str().unwrap_or(""),
        q(&phase["submit_ms"]),
        q(&phase["pickup_ms"]),
        phase["completed_per_s"],
        phase["answers"],
    )
}

/// Every accepted job SUCCEEDED (waiting up to 60 s for the last ones);
/// how many took more than one attempt.
async fn check_every_job(
    service: &Service,
    since: chrono::DateTime<chrono::Utc>,
    submits: &[Submit],
) -> Result<Value> {
    let accepted: Vec<&str> = submits.iter().filter_map(|s| s.job_id.as_deref()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = jobs_of(service, since).await?;
        let unfinished = accepted
            .iter()
            .filter(|id| !jobs.get(**id).is_some_and(|j| j.succeeded))
            .count();
        if unfinished == 0 || Instant::now() > deadline {
            let second_attempts = jobs.values().filter(|j| j.attempts > 1).count();
            if unfinished > 0 {
                let mut conn = service.connect().await?;
                for id in accepted
                    .iter()
                    .filter(|id| !jobs.get(**id).is_some_and(|j| j.succeeded))
                    .take(5)
                {
                    let row: Option<JobState> = sqlx::query_as(
                        "SELECT status, attempts, handbacks, error_type, error_message \
                             FROM jobs WHERE job_id = $1",
                    )
                    .bind(id)
                    .fetch_optional(&mut conn)
                    .await?;
                    println!("# not SUCCEEDED: {id} {row:?}");
                }
            }
            ensure!(
                unfinished == 0,
                "{unfinished} of {} accepted jobs had not SUCCEEDED 60 s after the load",
                accepted.len()
            );
            return Ok(json!({
                "accepted": accepted.len(),
                "succeeded": accepted.len(),
                "second_attempts": second_attempts,
            }));
        }
        // Polling the database the run set up, for the last few jobs.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The statements that took the most of the database's time since the
/// last call (or the start), then a new count from zero.
async fn top_statements(conn: &mut PgConnection, phase: &str) -> Result<Value> {
    let rows: Vec<(String, i64, f64, f64, i64, i64)> = sqlx::query_as(
        "SELECT query, calls, total_exec_time, mean_exec_time, rows, \
                shared_blks_hit + shared_blks_read \
         FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 8",
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&mut *conn)
        .await?;
    println!("# where the database's time went: {phase}");
    let mut top = Vec::new();
    for (query, calls, total, mean, rows, blocks) in rows {
        let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ");
        let short: String = query.chars().take(100).collect();
        println!(
            "#   {total:>9.0} ms {calls:>8} calls {mean:>8.3} ms/call {:>8.0} blocks/call  {short}",
            blocks as f64 / calls.max(1) as f64
        );
        top.push(json!({"query": short, "calls": calls, "total_ms": total.round(),
                        "mean_ms": mean, "rows": rows, "blocks_per_call": blocks as f64 / calls.max(1) as f64}));
    }
    Ok(json!(top))
}

/// Dead and live tuples of the queue's tables, and the QUEUED backlog.
async fn table_sample(conn: &mut PgConnection) -> Result<Value> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_dead_tup, n_live_tup FROM pg_stat_user_tables \
         WHERE relname IN ('jobs', 'outbox', 'job_count_deltas', 'job_counts', 'job_minutes', \
                           'idempotency_keys', 'job_results', 'job_attempts') \
         ORDER BY relname",
    )
    .fetch_all(&mut *conn)
    .await?;
    let backlog: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'QUEUED'")
        .fetch_one(&mut *conn)
        .await?;
    let dead: i64 = rows.iter().map(|r| r.1).sum();
    let by_table: serde_json::Map<String, Value> = rows
        .into_iter()
        .map(|(name, dead, live)| (name, json!({"dead": dead, "live": live})))
        .collect();
    Ok(json!({"dead": dead, "backlog": backlog, "tables": by_table}))
}

/// Samples [`table_sample`] every 5 s until stopped.
async fn sample_tables(
    service: &Service,
    load: &Load,
    stop: Arc<AtomicBool>,
) -> Result<Vec<(f64, Value)>> {
    let mut conn = service.connect().await?;
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let sample = table_sample(&mut conn).await?;
        println!(
            "#   t={:>4.0} s  dead tuples {:>8}  backlog {:>6}",
            load.elapsed(),
            sample["dead"],
            sample["backlog"]
        );
        samples.push((load.elapsed(), sample));
    }
    Ok(samples)
}

async fn held(args: &Args) -> Result<Value> {
    let service = Service::start(args).await?;
    let mut stats = service.connect().await?;
    top_statements(&mut stats, "warm-up").await?;
    let load = Load::start(&service.client, args.rate, args.job_ms);
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let mut tops = Vec::new();
    let (samples, held_at) = {
        let sampling = sample_tables(&service, &load, stop_sampling.clone());
        let fault = async {
            tokio::time::sleep(Duration::from_secs(args.before_secs)).await;
            let mut holder = service.connect().await?;
            sqlx::raw_sql("BEGIN; SELECT txid_current();")
                .execute(&mut holder)
                .await?;
            let from = load.elapsed();
            tops.push(top_statements(&mut stats, "before").await?);
            println!("# an idle transaction holds the xmin horizon from t={from:.0} s");
            tokio::time::sleep(Duration::from_secs(args.held_secs)).await;
            sqlx::raw_sql("ROLLBACK").execute(&mut holder).await?;
            let to = load.elapsed();
            tops.push(top_statements(&mut stats, "held").await?);
            println!("# released at t={to:.0} s");
            tokio::time::sleep(Duration::from_secs(args.after_secs)).await;
            tops.push(top_statements(&mut stats, "after").await?);
            stop_sampling.store(true, Ordering::Relaxed);
            anyhow::Ok((from, to))
        };
        let (samples, held_at) = tokio::join!(sampling, fault);
        (samples?, held_at?)
    };
    let end = load.elapsed();
    let (since, submits) = load.stop().await;
    let checked = check_every_job(&service, since, &submits).await?;
    let jobs = jobs_of(&service, since).await?;
    let (from, to) = held_at;
    let phases = vec![
        phase("before", (0.0, from), &submits, &jobs),
        phase("held", (from, to), &submits, &jobs),
        phase("after", (to, end), &submits, &jobs),
    ];
    let dead_at = |t0: f64, t1: f64| {
        samples
            .iter()
            .filter(|(t, _)| *t >= t0 && *t < t1)
            .map(|(_, s)| s["dead"].as_i64().unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let dead_before = dead_at(0.0, from);
    let dead_held = dead_at(from, to);
    // When the dead tuples came back within twice the before's peak.
    let reclaimed_after_s = samples
        .iter()
        .filter(|(t, _)| *t >= to)
        .find(|(_, s)| s["dead"].as_i64().unwrap_or(i64::MAX) <= 2 * dead_before.max(1_000))
        .map(|(t, _)| ((t - to) * 10.0).round() / 10.0);
    let dead_end = samples
        .last()
        .map(|(_, s)| s.clone())
        .unwrap_or(Value::Null);
    let up = service.processes_up();
    Ok(json!({
        "rate": args.rate, "job_ms": args.job_ms, "held_secs": args.held_secs,
        "phases": phases,
        "dead_tuples": {"before_max": dead_before, "held_max": dead_held,
                         "reclaimed_after_s": reclaimed_after_s, "at_end": dead_end},
        "jobs": checked, "processes_up": up, "top_statements": tops,
    }))
}

/// `terminate` or `exhaust`: `fault` runs for `fault_secs` while the load
/// goes on; then `after_secs` of load without it.
async fn connection_fault(args: &Args, terminate: bool) -> Result<Value> {
    let service = Service::start(args).await?;
    let load = Load::start(&service.client, args.rate, args.job_ms);
    tokio::time::sleep(Duration::from_secs(args.before_secs)).await;
    let from = load.elapsed();
    let mut cut = 0;
    let mut held = 0;
    if terminate {
        let mut killer = PgConnection::connect(&service.postgres.admin_url()).await?;
        let until = Instant::now() + Duration::from_secs(args.fault_secs);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        while Instant::now() < until {
            tick.tick().await;
            cut += terminate_connections(&mut killer, service.database()).await;
        }
    } else {
        let connections = take_every_free_connection(&service.postgres.admin_url()).await;
        held = connections.len();
        tokio::time::sleep(Duration::from_secs(args.fault_secs)).await;
        drop(connections);
    }
    let to = load.elapsed();
    tokio::time::sleep(Duration::from_secs(args.after_secs)).await;
    let end = load.elapsed();
    let (since, submits) = load.stop().await;
    let first_accepted_after = submits
        .iter()
        .filter(|s| s.due >= to && s.status == 202)
        .map(|s| s.due - to)
        .fold(f64::INFINITY, f64::min);
    let checked = check_every_job(&service, since, &submits).await?;
    let jobs = jobs_of(&service, since).await?;
    let phases = vec![
        phase("before", (0.0, from), &submits, &jobs),
        phase("fault", (from, to), &submits, &jobs),
        phase("after", (to, end), &submits, &jobs),
    ];
    let server_errors = submits
        .iter()
        .filter(|s| s.status >= 500 && s.status != 503)
        .count();
    let up = service.processes_up();
    Ok(json!({
        "rate": args.rate, "fault_secs": args.fault_secs,
        "connections_cut": cut, "connections_held": held,
        "phases": phases, "server_errors_other_than_503": server_errors,
        "first_202_after_fault_s": (first_accepted_after * 100.0).round() / 100.0,
        "jobs": checked, "processes_up": up,
    }))
}

fn print(scenario: &str, result: &Value) {
    println!("{scenario}");
    for phase in result["phases"].as_array().into_iter().flatten() {
        println!("{}", summary_line(phase));
    }
    let mut extra = result.clone();
    if let Some(o) = extra.as_object_mut() {
        o.remove("phases");
        o.remove("top_statements");
    }
    println!("  {extra}");
    let mut line = result.clone();
    line["scenario"] = json!(scenario);
    println!("{line}");
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!("# receipt-pressure {args:?}");
    for scenario in args.scenarios.split(',').map(str::trim) {
        let result = match scenario {
            "held" => held(&args).await?,
            "terminate" => connection_fault(&args, true).await?,
            "exhaust" => connection_fault(&args, false).await?,
            other => anyhow::bail!("no scenario {other}: held, terminate or exhaust"),
        };
        print(scenario, &result);
    }
    Ok(())
}
