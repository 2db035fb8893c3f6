//! Every setting is an environment variable, mirrored by a command-line flag.
//! Names and defaults are part of the contract (`docs/api.md`); the full
//! table, with what each one does, is in `docs/operations.md`.

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

    /// How often a worker pool that exports metrics reads the queue's
    /// depth and age, the running jobs and the outbox from the database
    /// (at least 100ms).
    #[arg(long, env = "METRICS_SAMPLE_INTERVAL", default_value = "15s", value_parser = parse_sample_interval)]
    pub metrics_sample_interval: Duration,

    /// Tenants given series of their own (`receipt_tenant_jobs_queued`,
    /// `receipt_tenant_jobs_running`): the N with the most queued jobs at
    /// each sample, 0 (none, the default) to 100.
    #[arg(long, env = "METRICS_TENANTS", default_value = "0", value_parser = clap::value_parser!(u16).range(0..=100))]
    pub metrics_tenants: u16,

    /// `sqlite://...` (embedded) or `postgres://...`.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://data/jobs.db")]
    pub database_url: String,

    /// `transaction`: `DATABASE_URL` names a pooler in transaction mode
    /// (PgBouncer's `pool_mode = transaction`), which may hand each
    /// transaction another server connection: no statement is kept prepared
    /// across transactions, and whatever needs a session of its own
    /// (migrations' lock, LISTEN, the LISTEN of workers claiming from the job rows) goes to
    /// `DATABASE_DIRECT_URL`. `none`: a direct connection or a session-mode
    /// pooler.
    #[arg(long, env = "DATABASE_POOLER", default_value = "none", value_enum)]
    pub database_pooler: DatabasePooler,

    /// Postgres itself, not the pooler, for what needs a session of its
    /// own; required with `DATABASE_POOLER=transaction`.
    #[arg(long, env = "DATABASE_DIRECT_URL", hide_env_values = true)]
    pub database_direct_url: Option<String>,

    /// Connections each process's Postgres pool opens at most (at least 4):
    /// count them, for every process, against the server's
    /// `max_connections` (or the pooler's `max_client_conn`).
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value = "20", value_parser = clap::value_parser!(u32).range(4..=10_000))]
    pub database_pool_size: u32,

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

    /// `tenant:key,tenant:key`: the complete list of valid keys. At each
    /// start every stored key not in it is revoked; a key shorter than 16
    /// characters refuses the start.
    #[arg(long, env = "API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,

    /// Master keys that seal webhook and filing endpoint secrets at rest:
    /// base64 32-byte keys, comma-separated, the first sealing, the others
    /// still read (while `secrets rotate` moves off them). Required on
    /// Postgres; unset on SQLite, a key file beside the database is used
    /// (made at first start).
    #[arg(long, env = "RECEIPT_MASTER_KEYS", hide_env_values = true)]
    pub master_keys: Option<String>,

    /// How long an idempotency key is remembered.
    #[arg(long, env = "IDEMPOTENCY_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub idempotency_ttl: Duration,

    /// Delays between webhook delivery attempts.
    #[arg(long, env = "WEBHOOK_RETRY_SCHEDULE", default_value = "5s,5m,30m,2h,5h,10h,14h,20h,24h", value_parser = parse_schedule)]
    pub webhook_retry_schedule: Schedule,

    /// Allow webhook URLs on private addresses (tests, local use).
    #[arg(long, env = "WEBHOOK_ALLOW_PRIVATE", default_value = "false", value_parser = BoolishValueParser::new())]
    pub webhook_allow_private: bool,

    /// How long a webhook receiver has to answer before the attempt counts
    /// as failed.
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

    /// How long an entry of the audit log (`GET /v1/audit`) is kept, apart
    /// from jobs' retention: then it is deleted.
    #[arg(long, env = "AUDIT_RETENTION", default_value = "400d", value_parser = humantime::parse_duration)]
    pub audit_retention: Duration,

    /// The queue's name, and the prefix of every Redis key the service
    /// writes. Deployments sharing one Redis use different names.
    #[arg(long, env = "QUEUE_NAME", default_value = "receipt")]
    pub queue_name: String,

    /// How long a running attempt's lease lasts without a heartbeat; a
    /// worker that dies is noticed after at most this long.
    #[arg(long, env = "JOB_LEASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub job_lease: Duration,

    /// The first retry's backoff; it doubles per attempt.
    #[arg(long, env = "RETRY_BASE_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub retry_base_delay: Duration,

    /// The longest retry backoff.
    #[arg(long, env = "RETRY_MAX_DELAY", default_value = "5m", value_parser = humantime::parse_duration)]
    pub retry_max_delay: Duration,

    /// A queued job not yet picked up is published to the queue again after
    /// this long (then twice as long each time), in case the queue lost its
    /// message.
    #[arg(long, env = "REPUBLISH_AFTER", default_value = "5m", value_parser = humantime::parse_duration)]
    pub republish_after: Duration,

    /// What one priority step is worth: among a tenant's due jobs a
    /// `normal` job ranks as if due this much later than a `high` one, a
    /// `low` job twice this much; so a job waits behind a stream of jobs
    /// of higher priority for at most this long per step.
    #[arg(long, env = "PRIORITY_AGING", default_value = "5m", value_parser = humantime::parse_duration)]
    pub priority_aging: Duration,

    /// RUNNING jobs one tenant may have at once, over every worker
    /// process; 0 for no cap. A job over it waits, parked, as QUEUED
    /// (`waiting.reason` is `tenant_concurrency_limit`) while other
    /// tenants' jobs run. Every process must be given the same caps.
    #[arg(long, env = "MAX_RUNNING_PER_TENANT", default_value = "0")]
    pub max_running_per_tenant: u32,

    /// RUNNING jobs of a kind one tenant may have at once, written
    /// `kind=n,kind=n` (for example `ledger-export=2`); kinds not named
    /// have no cap of their own.
    #[arg(long, env = "MAX_RUNNING_PER_KIND", default_value = "", value_parser = parse_kind_caps)]
    pub max_running_per_kind: KindCaps,

    /// Accepted and ignored, so that configurations that set it still
    /// start: a worker pool fetches (Redis) or claims (the job rows) as
    /// many jobs as it has free slots.
    #[arg(long, env = "QUEUE_PREFETCH", default_value = "1", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub queue_prefetch: u16,

    /// Requests per second per tenant, with bursts of twice that, counted
    /// by each api process; over it: 429 with Retry-After. Health,
    /// readiness, metrics and the OpenAPI document are not limited (the
    /// document read with a key counts).
    #[arg(long, env = "RATE_LIMIT", default_value = "20000", value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit: u32,

    /// QUEUED + RUNNING jobs per tenant; a submit over it is refused with
    /// 429 and Retry-After, and stores nothing.
    #[arg(long, env = "MAX_ACTIVE_JOBS", default_value = "100000", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_jobs: u64,

    /// Webhooks one tenant may have registered for all its jobs (per-job
    /// webhooks are not counted: they go with their job).
    #[arg(long, env = "MAX_WEBHOOKS", default_value = "100", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_webhooks: u64,

    /// Schedules one tenant may have (`/v1/schedules`); a create over it
    /// is refused with 429.
    #[arg(long, env = "MAX_SCHEDULES", default_value = "10000", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_schedules: u64,

    /// Webhooks one job may have registered for it (`job_id`).
    #[arg(long, env = "MAX_WEBHOOKS_PER_JOB", default_value = "10", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_webhooks_per_job: u64,

    /// How long a `/v1` request may take before it is answered 503 with
    /// Retry-After, whatever it waits on (a database or a Redis that does
    /// not answer, a full group commit). A long poll may take its wait on
    /// top; a body of over 1 MiB (a streamed result) is not bounded by it.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_request_timeout)]
    pub request_timeout: Duration,

    /// Long polls (`GET /v1/jobs/{id}?wait=N`, and waiting leases of
    /// workers over HTTP) one tenant may hold open at once in each api
    /// process; one more is refused with 429.
    #[arg(long, env = "MAX_LONG_POLLS", default_value = "100", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_long_polls: u32,

    /// How log lines are written: `text` (human-readable; coloured only on
    /// a terminal, and not with NO_COLOR set) or `json` (one object per
    /// line, for log shippers).
    #[arg(long, env = "LOG_FORMAT", default_value = "text", value_enum)]
    pub log_format: LogFormat,
}

/// What stands between Receipt and Postgres (`DATABASE_POOLER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatabasePooler {
    None,
    Transaction,
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

fn parse_sample_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if interval < Duration::from_millis(100) {
        return Err("at least 100ms".into());
    }
    Ok(interval)
}

fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&timeout) {
        return Err("from 1s to 10m".into());
    }
    Ok(timeout)
}

/// `MAX_RUNNING_PER_KIND`: caps per kind, each at least 1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindCaps(pub Vec<(String, u32)>);

fn parse_kind_caps(text: &str) -> Result<KindCaps, String> {
    let mut caps: Vec<(String, u32)> = Vec::new();
    for part in text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let (kind, cap) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not kind=n"))?;
        let (kind, cap) = (kind.trim(), cap.trim());
        let cap = cap
            .parse::<u32>()
            .ok()
            .filter(|cap| *cap > 0)
            .ok_or_else(|| format!("{part:?}: the cap must be a whole number above 0"))?;
        if kind.is_empty() || caps.iter().any(|(known, _)| known == kind) {
            return Err(format!("{part:?}: name each kind once"));
        }
        caps.push((kind.to_owned(), cap));
    }
    Ok(KindCaps(caps))
}

/// The concurrency caps a claim enforces (`MAX_RUNNING_PER_TENANT`,
/// `MAX_RUNNING_PER_KIND`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    /// 0 for none.
    pub per_tenant: u32,
    pub per_kind: Vec<(String, u32)>,
}

impl Caps {
    pub fn is_none(&self) -> bool {
        self.per_tenant == 0 && self.per_kind.is_empty()
    }

    /// The cap of `kind`, if it has one.
    pub fn of_kind(&self, kind: &str) -> Option<u32> {
        self.per_kind
            .iter()
            .find_map(|(known, cap)| (known == kind).then_some(*cap))
    }
}

impl Settings {
    pub fn caps(&self) -> Caps {
        Caps {
            per_tenant: self.max_running_per_tenant,
            per_kind: self.max_running_per_kind.0.clone(),
        }
    }

    pub fn embedded_worker(&self) -> bool {
        self.embedded_worker.unwrap_or(self.redis_url.is_none())
    }

    pub fn worker_concurrency(&self) -> usize {
        self.worker_concurrency
            .filter(|n| *n > 0)
            .unwrap_or_else(|| 4 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The `(tenant, key)` pairs of `API_KEYS`, each key once. An entry
    /// that is malformed, or whose key is shorter than [`MIN_API_KEY_LEN`],
    /// is an error that names the entry and its tenant, never the key.
    pub fn api_keys(&self) -> Result<Vec<(String, String)>> {
        let Some(text) = self.api_keys.as_deref().filter(|t| !t.trim().is_empty()) else {
            return Ok(Vec::new());
        };
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (index, entry) in text.split(',').enumerate() {
            let (tenant, key) = parse_api_keys_entry(index + 1, entry.trim())?;
            match pairs.iter().find(|(_, known)| *known == key) {
                Some((other, _)) if *other == tenant => {}
                Some((other, _)) => {
                    return Err(config(format!(
                        "API_KEYS lists one key for two tenants, {other:?} and {tenant:?}; \
                         a key belongs to one tenant"
                    )));
                }
                None => pairs.push((tenant, key)),
            }
        }
        Ok(pairs)
    }
}

/// The shortest key `API_KEYS` accepts: a key that short is guessable,
/// and a key is all it takes to act as its tenant.
pub const MIN_API_KEY_LEN: usize = 16;

fn config(message: String) -> SettingsError {
    SettingsError(message)
}

/// One `tenant:key` entry of `API_KEYS`, the `n`th. No message quotes the
/// entry: it may hold a key.
fn parse_api_keys_entry(n: usize, entry: &str) -> Result<(String, String)> {
    if entry.is_empty() {
        return Err(config(format!(
            "API_KEYS entry {n} is empty; write tenant:key,tenant:key"
        )));
    }
    let Some((tenant, key)) = entry.split_once(':') else {
        return Err(config(format!(
            "API_KEYS entry {n} is not tenant:key (it has no ':'); write tenant:key,tenant:key"
        )));
    };
    let (tenant, key) = (tenant.trim(), key.trim());
    if tenant.is_empty() {
        return Err(config(format!(
            "API_KEYS entry {n} has no tenant before its ':'"
        )));
    }
    check_tenant(tenant).map_err(|why| config(format!("API_KEYS entry {n}: {why}")))?;
    if key.is_empty() {
        return Err(config(format!(
            "API_KEYS entry {n} has no key for tenant {tenant:?}"
        )));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(config(format!(
            "API_KEYS: the key of tenant {tenant:?} (entry {n}) has a character a bearer \
             token cannot carry; use visible ASCII only (! to ~)"
        )));
    }
    if key.len() < MIN_API_KEY_LEN {
        return Err(config(format!(
            "API_KEYS: the key of tenant {tenant:?} (entry {n}) is shorter than \
             {MIN_API_KEY_LEN} characters; use a long random key (for example \
             `openssl rand -hex 32`)"
        )));
    }
    Ok((tenant.to_owned(), key.to_owned()))
}

/// Whether `tenant` can name a tenant: 1 to 255 visible ASCII characters
/// other than `,` and `:`, so that every tenant can be written in
/// `API_KEYS`. The reason, when it cannot.
pub fn check_tenant(tenant: &str) -> Result<(), String> {
    if tenant.is_empty() || tenant.len() > 255 {
        return Err(format!(
            "the tenant {tenant:?} must be 1 to 255 characters long"
        ));
    }
    if !tenant
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b',' && b != b':')
    {
        return Err(format!(
            "the tenant {tenant:?} may hold only visible ASCII characters other than ',' and ':'"
        ));
    }
    Ok(())
}

/// `LOG_FORMAT`: how log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`
    /// and the event's fields.
    Json,
}

/// A setting that does not parse, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

type Result<T, E = SettingsError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(api_keys: &str) -> Result<Vec<(String, String)>> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["api", "--api-keys", api_keys])
            .expect("arguments");
        cli.settings.api_keys()
    }

    fn message(api_keys: &str) -> String {
        parsed(api_keys).expect_err("refused").to_string()
    }

    #[test]
    fn well_formed_keys_are_read_trimmed_and_once() {
        let pairs = parsed(" a:key-one-long-enough , b:key-two:with-colon ,a:key-one-long-enough")
            .expect("valid");
        assert_eq!(
            pairs,
            [
                ("a".to_owned(), "key-one-long-enough".to_owned()),
                ("b".to_owned(), "key-two:with-colon".to_owned()),
            ]
        );
    }

    #[test]
    fn a_short_key_is_refused_naming_its_tenant_but_not_the_key() {
        let text = message("good:key-long-enough-0001,acme:abcdefghijklmno");
        assert!(text.contains("\"acme\"") && text.contains("16"), "{text}");
        assert!(!text.contains("abcdefghijklmno"), "{text}");
    }

    #[test]
    fn malformed_entries_are_refused_without_quoting_them() {
        for (api_keys, says) in [
            ("secret-without-a-colon-0001", "entry 1 is not tenant:key"),
            ("a:key-long-enough-0001,", "entry 2 is empty"),
            (":secret-without-a-tenant", "entry 1 has no tenant"),
            ("a:", "no key for tenant \"a\""),
            ("a:secret with a space 0001", "visible ASCII"),
            ("a b:secret-long-enough-0001", "the tenant \"a b\""),
            (
                "a:secret-long-enough-0001,b:secret-long-enough-0001",
                "two tenants",
            ),
        ] {
            let text = message(api_keys);
            assert!(text.contains(says), "{api_keys:?}: {text}");
            assert!(!text.contains("secret"), "{api_keys:?} quoted: {text}");
        }
    }

    #[test]
    fn unset_or_blank_means_no_configured_keys() {
        assert!(parsed("  ").expect("blank").is_empty());
    }
}
