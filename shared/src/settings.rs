//! Every setting is an environment variable, mirrored by a command-line flag.
//! The names and defaults of API.md's table are kept exactly; the ones marked
//! "Receipt addition" are ours and documented in the README.

use std::time::Duration;

use clap::{Args, builder::BoolishValueParser};

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Where the API listens (`host:port`; port 0 picks a free port).
    #[arg(long, env = "BIND_ADDR", default_value = "127.0.0.1:8080")]
    pub bind_addr: String,

    /// Where a `worker` process serves `GET /metrics` (`host:port`; port 0
    /// picks a free port). Unset: it serves none.
    #[arg(long, env = "METRICS_ADDR")]
    pub metrics_addr: Option<String>,

    /// `sqlite://...` (embedded) or `postgres://...`.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://data/jobs.db")]
    pub database_url: String,

    /// Set: the job queue is Redis. Unset: it lives in the database.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    /// Whether the `api` process also runs the worker pool (default: true
    /// when `REDIS_URL` is unset).
    #[arg(long, env = "EMBEDDED_WORKER", value_parser = BoolishValueParser::new())]
    pub embedded_worker: Option<bool>,

    /// Jobs one worker process runs at once (default: 4 per core).
    #[arg(long, env = "WORKER_CONCURRENCY")]
    pub worker_concurrency: Option<usize>,

    /// `tenant:key,tenant:key`.
    #[arg(long, env = "API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,

    /// How long an idempotency key is remembered.
    #[arg(long, env = "IDEMPOTENCY_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub idempotency_ttl: Duration,

    /// Delays between webhook delivery attempts.
    #[arg(long, env = "WEBHOOK_RETRY_SCHEDULE", default_value = "5s,5m,30m,2h,5h,10h,14h,20h,24h", value_parser = parse_schedule)]
    pub webhook_retry_schedule: Schedule,

    /// Allow webhook URLs on private addresses (tests, local use).
    #[arg(long, env = "WEBHOOK_ALLOW_PRIVATE", default_value = "false", value_parser = BoolishValueParser::new())]
    pub webhook_allow_private: bool,

    /// Receipt addition: how long a webhook receiver has to answer.
    #[arg(long, env = "WEBHOOK_TIMEOUT", default_value = "15s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: Duration,

    /// Register the diagnostic `sleep` kind.
    #[arg(long, env = "ENABLE_DIAGNOSTIC_KINDS", default_value = "false", value_parser = BoolishValueParser::new())]
    pub enable_diagnostic_kinds: bool,

    /// On SIGTERM: stop taking jobs, finish running ones for this long, then exit.
    #[arg(long, env = "SHUTDOWN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// How long a job is kept once final (SUCCEEDED, FAILED, CANCELLED):
    /// then it is deleted with its result, webhook events, delivery log and
    /// per-job webhooks, and `GET` answers 404. Idempotency keys keep their
    /// own TTL. Ledger entries are never deleted.
    #[arg(long, env = "JOB_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub job_retention: Duration,

    /// Receipt addition: the queue's name, and the prefix of every Redis key
    /// the service writes. Deployments sharing one Redis use different names.
    #[arg(long, env = "QUEUE_NAME", default_value = "receipt")]
    pub queue_name: String,

    /// Receipt addition: how long a running attempt's lease lasts without a
    /// heartbeat; a worker that dies is noticed after at most this long.
    #[arg(long, env = "JOB_LEASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub job_lease: Duration,

    /// Receipt addition: the first retry's backoff; it doubles per attempt.
    #[arg(long, env = "RETRY_BASE_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub retry_base_delay: Duration,

    /// Receipt addition: the longest retry backoff.
    #[arg(long, env = "RETRY_MAX_DELAY", default_value = "5m", value_parser = humantime::parse_duration)]
    pub retry_max_delay: Duration,

    /// Receipt addition: a queued job not yet picked up is published to the
    /// queue again after this long (then twice as long each time), in case
    /// the queue lost its message.
    #[arg(long, env = "REPUBLISH_AFTER", default_value = "5m", value_parser = humantime::parse_duration)]
    pub republish_after: Duration,

    /// Receipt addition: messages a worker process fetches from a shared
    /// queue (Redis, SQLite, Postgres) per call. Above 1 it is faster for
    /// short jobs, but apalis 1.0 stops heartbeating while fetched messages
    /// wait for a busy slot, so with jobs that run for minutes another
    /// worker reclaims them and this worker's apalis restarts (see README).
    #[arg(long, env = "QUEUE_PREFETCH", default_value = "1", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub queue_prefetch: u16,
}

/// A list of delays, written like `5s,5m,30m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule(pub Vec<Duration>);

fn parse_schedule(text: &str) -> Result<Schedule, String> {
    text.split(',')
        .map(|part| humantime::parse_duration(part.trim()).map_err(|e| format!("{part:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()
        .map(Schedule)
}

impl Settings {
    pub fn embedded_worker(&self) -> bool {
        self.embedded_worker.unwrap_or(self.redis_url.is_none())
    }

    pub fn worker_concurrency(&self) -> usize {
        self.worker_concurrency
            .filter(|n| *n > 0)
            .unwrap_or_else(|| 4 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The `(tenant, key)` pairs of `API_KEYS`.
    pub fn api_keys(&self) -> crate::Result<Vec<(String, String)>> {
        let Some(text) = self.api_keys.as_deref().filter(|t| !t.trim().is_empty()) else {
            return Ok(Vec::new());
        };
        text.split(',')
            .map(|pair| {
                let (tenant, key) = pair.trim().split_once(':').ok_or_else(|| {
                    crate::Error::Config("API_KEYS must look like tenant:key,tenant:key".into())
                })?;
                if tenant.is_empty() || key.is_empty() {
                    return Err(crate::Error::Config(
                        "API_KEYS has an empty tenant or key".into(),
                    ));
                }
                Ok((tenant.to_owned(), key.to_owned()))
            })
            .collect()
    }
}
