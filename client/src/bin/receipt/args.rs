//! The command line: what each command takes, and its `--help`.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// How a run ended, for `--help` (`docs/clients.md` has the same table).
const EXIT_CODES: &str = "Exit codes:
  0  done; with --wait or `jobs wait`, the job SUCCEEDED
  1  the job FAILED
  2  bad input (an unknown command or option, a malformed --param, an unreadable file, no API key)
  3  the job was CANCELLED
  4  Receipt refused the request (a 4xx: not found, invalid, conflict, unauthorized)
  5  Receipt did not answer, or answered 5xx or 429, until --deadline
  6  the wait's --timeout passed before the job ended";

/// Receipt from the command line: submit reports, follow and fetch them,
/// import the ledger, manage webhooks and schedules.
#[derive(Debug, Parser)]
#[command(name = "receipt", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The service's base URL.
    #[arg(
        long,
        env = "RECEIPT_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// The API key (a tenant's).
    #[arg(long, env = "RECEIPT_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// `table` for people, `json` for scripts (the API's own objects).
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// How long a request may keep being retried (seconds).
    #[arg(long, default_value_t = 120, global = true)]
    pub deadline: u64,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit a report: `receipt submit gst-summary --param month=2026-10 --wait`.
    Submit(SubmitArgs),
    /// List, show or wait for jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Write a SUCCEEDED job's result to stdout (JSON, or CSV with --csv).
    Result {
        job_id: String,
        /// CSV, for a tabular kind (ledger-export).
        #[arg(long)]
        csv: bool,
    },
    /// Cancel a job.
    Cancel { job_id: String },
    /// Retry a FAILED or CANCELLED job as a new job.
    Retry {
        job_id: String,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Import ledger entries.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Register and manage webhooks.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Create and manage recurring schedules.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// A month's state, or reopen a closed month.
    #[command(subcommand)]
    Periods(PeriodsCommand),
    /// The filing endpoint period-close files returns with.
    #[command(subcommand, name = "filing-endpoint")]
    FilingEndpoint(FilingCommand),
    /// Report kinds: the built-in ones, and the tenant's registered ones
    /// (run by its workers over HTTP).
    #[command(subcommand)]
    Kinds(KindsCommand),
    /// The tenant's workers over HTTP: what each runs and holds, when it
    /// was last seen.
    Workers,
}

#[derive(Debug, Subcommand)]
pub enum KindsCommand {
    /// Every kind the tenant may submit.
    List,
    /// One kind, with its schema.
    Get { name: String },
    /// Register a kind or change it, from a JSON declaration
    /// (`docs/api.md`, Registered kinds); the same one again changes
    /// nothing.
    Put {
        name: String,
        /// The declaration's file (`-` for stdin).
        #[arg(long)]
        file: String,
    },
    /// Delete a registered kind; its queued jobs are still leased.
    Delete { name: String },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The report kind: gst-summary, ledger-export, period-close, ...
    pub kind: String,
    /// A parameter, `name=value`; a value that is JSON (`200`, `true`,
    /// `"text"`) is taken as JSON, anything else as a string.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// All the parameters as one JSON object (the --param ones are added).
    #[arg(long, value_name = "JSON")]
    pub params_json: Option<String>,
    /// Start at this RFC 3339 time.
    #[arg(long, conflicts_with = "delay")]
    pub run_at: Option<String>,
    /// Start this many seconds from now.
    #[arg(long)]
    pub delay: Option<u64>,
    /// high, normal or low.
    #[arg(long)]
    pub priority: Option<String>,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The Idempotency-Key of this intent (default: a fresh one, reused
    /// on every retry of this run). Give the same one to run the same
    /// intent again safely.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait for the job to end, showing its progress; the exit code says
    /// how it ended.
    #[arg(long)]
    pub wait: bool,
    /// How long to wait at most (seconds).
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Jobs, newest first, every page.
    List {
        /// QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        kind: Option<String>,
        /// Only the jobs this schedule made.
        #[arg(long)]
        schedule: Option<String>,
        /// At most this many jobs.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One job.
    Get { job_id: String },
    /// Wait for a job to end; the exit code says how it ended.
    Wait {
        job_id: String,
        /// How long to wait at most (seconds).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Import entries from a JSON file (`{"entries": [...]}` or a list of
    /// entries; `-` reads stdin).
    Import { file: String },
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Register a webhook; its secret is shown only now.
    Add {
        #[arg(value_name = "URL")]
        receiver_url: String,
        /// job.succeeded, job.failed or job.cancelled (repeatable; all
        /// when not given).
        #[arg(long = "event")]
        events: Vec<String>,
        /// Only this job's events.
        #[arg(long = "job")]
        job_id: Option<String>,
    },
    List,
    Get {
        webhook_id: String,
    },
    Delete {
        webhook_id: String,
    },
    /// Its delivery attempts, newest first.
    Deliveries {
        webhook_id: String,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Enable it again after a receiver's 410.
    Enable {
        webhook_id: String,
    },
    /// Give it a new secret (shown only now).
    Rotate {
        webhook_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    List,
    Get {
        schedule_id: String,
    },
    /// `receipt schedules create gst-summary --param 'month={"$fire":"previous_month"}' --cron '0 6 1 * *' --timezone Asia/Kolkata`
    Create(Box<CreateSchedule>),
    Pause {
        schedule_id: String,
    },
    Resume {
        schedule_id: String,
    },
    Delete {
        schedule_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PeriodsCommand {
    /// A month's state (YYYY-MM).
    Get { month: String },
    /// Make a closed month open again.
    Reopen { month: String },
}

#[derive(Debug, Subcommand)]
pub enum FilingCommand {
    /// Set (or replace) the URL; its secret is shown.
    Set {
        #[arg(value_name = "URL")]
        endpoint_url: String,
    },
    Get,
}

#[derive(Debug, Args)]
pub struct CreateSchedule {
    pub kind: String,
    /// A parameter, `name=value` (JSON when it is JSON, as for submit).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    #[arg(long, value_name = "JSON")]
    pub params_json: Option<String>,
    /// Five fields: minute hour day-of-month month day-of-week.
    #[arg(long)]
    pub cron: String,
    /// An IANA zone name.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    #[arg(long)]
    pub starts_at: Option<String>,
    #[arg(long)]
    pub ends_at: Option<String>,
    /// run_once or skip.
    #[arg(long)]
    pub misfire: Option<String>,
    /// high, normal or low.
    #[arg(long)]
    pub priority: Option<String>,
    #[command(flatten)]
    pub key: KeyArgs,
}
