//! `receipt`, Receipt's command line, over the client crate. Every failure
//! is one line on stderr and an exit code that says what happened (see
//! `receipt --help`).

mod args;
mod show;

use std::{io::IsTerminal, process::ExitCode, time::Duration};

use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use receipt_client::{
    Client, Error, Job, JobFilter, JobStatus, KindDeclaration, LedgerEntry, NewSchedule,
    NewWebhook, Priority, ResultFormat, RetryPolicy, Submit,
};
use serde_json::{Map, Value};

use args::{
    Cli, Command, FilingCommand, JobsCommand, KindsCommand, LedgerCommand, PeriodsCommand,
    SchedulesCommand, WaitArgs, WebhooksCommand,
};
use show::Show;

/// How a run ended, as its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Done = 0,
    JobFailed = 1,
    BadInput = 2,
    JobCancelled = 3,
    Refused = 4,
    Unavailable = 5,
    WaitTimedOut = 6,
}

/// A run that did not get what it asked for: its exit and its one line.
struct Failure(Exit, String);

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let exit = match &error {
            Error::Api { problem, .. } if problem.status < 500 && problem.status != 429 => {
                Exit::Refused
            }
            Error::Api { .. } | Error::Transport(_) | Error::Interrupted { .. } => {
                Exit::Unavailable
            }
            Error::WaitTimedOut(_) => Exit::WaitTimedOut,
            Error::Invalid(_) | Error::Io(_) | Error::WebhookRejected(_) => Exit::BadInput,
            _ => Exit::Unavailable,
        };
        let mut line = error.to_string();
        for field in error.field_errors() {
            line += &format!("; {}: {}", field.field, field.message);
        }
        if let Some(ids) = error.problem().and_then(|p| p.ids.as_ref()) {
            line += &format!("; ids: {}", ids.join(", "));
        }
        Failure(exit, line)
    }
}

fn bad_input(message: impl Into<String>) -> Failure {
    Failure(Exit::BadInput, message.into())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!(
                "receipt: {}; see receipt --help",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(Exit::BadInput as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("receipt: {error}");
            return ExitCode::from(Exit::Unavailable as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(Failure(exit, line)) => {
            eprintln!("receipt: {line}");
            ExitCode::from(exit as u8)
        }
    }
}

async fn run(cli: Cli) -> Result<Exit, Failure> {
    let Some(key) = cli.api_key.as_deref() else {
        return Err(bad_input(
            "no API key: set RECEIPT_API_KEY or pass --api-key",
        ));
    };
    let client = Client::builder(&cli.url, key)
        .retry(RetryPolicy {
            deadline: Duration::from_secs(cli.deadline),
            ..RetryPolicy::default()
        })
        .build()?;
    let show = Show::new(cli.output);
    match cli.command {
        Command::Submit(args) => {
            let mut submit = Submit::json(
                &args.kind,
                params(args.params_json.as_deref(), &args.params)?,
            );
            if let Some(run_at) = args.run_at {
                submit = submit.run_at(run_at);
            }
            if let Some(delay) = args.delay {
                submit = submit.delay(Duration::from_secs(delay));
            }
            if let Some(priority) = args.priority.as_deref() {
                submit = submit.priority(priority_named(priority)?);
            }
            if let Some(key) = args.key.idempotency_key {
                submit = submit.idempotency_key(key);
            }
            let job = client.submit(submit).await?;
            finish(&client, &show, job, &args.wait).await
        }
        Command::Jobs(JobsCommand::List {
            status,
            kind,
            schedule,
            limit,
        }) => {
            let status = match status.as_deref() {
                None => None,
                Some(text) => Some(JobStatus::parse(&text.to_ascii_uppercase()).ok_or_else(
                    || {
                        bad_input(format!(
                        "--status {text:?} is not one of QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED"
                    ))
                    },
                )?),
            };
            let filter = JobFilter {
                status,
                kind,
                schedule_id: schedule,
                page_size: Some(200),
            };
            let jobs: Vec<Job> = client
                .jobs(filter)
                .take(limit.unwrap_or(usize::MAX))
                .try_collect()
                .await?;
            show.jobs(&jobs);
            Ok(Exit::Done)
        }
        Command::Jobs(JobsCommand::Get { job_id }) => {
            show.job(&client.job(&job_id).await?);
            Ok(Exit::Done)
        }
        Command::Jobs(JobsCommand::Wait { job_id, timeout }) => {
            let job = client.job(&job_id).await?;
            let wait = WaitArgs {
                wait: true,
                timeout,
            };
            finish(&client, &show, job, &wait).await
        }
        Command::Result { job_id, csv } => {
            let format = if csv {
                ResultFormat::Csv
            } else {
                ResultFormat::Json
            };
            let mut stdout = tokio::io::stdout();
            client.stream_result(&job_id, format, &mut stdout).await?;
            Ok(Exit::Done)
        }
        Command::Cancel { job_id } => {
            show.job(&client.cancel(&job_id).await?);
            Ok(Exit::Done)
        }
        Command::Retry { job_id, wait, key } => {
            let client = match key.idempotency_key {
                Some(key) => client.with_idempotency_key(key),
                None => client,
            };
            let job = client.retry(&job_id).await?;
            finish(&client, &show, job, &wait).await
        }
        Command::Ledger(LedgerCommand::Import { file }) => {
            let entries = read_entries(&file).await?;
            let outcome = client.import_ledger(&entries).await?;
            show.value(&serde_json::to_value(outcome).unwrap_or_default());
            Ok(Exit::Done)
        }
        Command::Webhooks(command) => webhooks(&client, &show, command).await,
        Command::Kinds(KindsCommand::List) => {
            show.rows(
                &client.kinds().await?,
                &["name", "builtin", "timeout_secs", "max_attempts", "about"],
            );
            Ok(Exit::Done)
        }
        Command::Kinds(KindsCommand::Get { name }) => {
            show.record(&client.kind(&name).await?);
            Ok(Exit::Done)
        }
        Command::Kinds(KindsCommand::Put { name, file }) => {
            let text = read_small(&file).await?;
            let declaration: KindDeclaration = serde_json::from_slice(&text)
                .map_err(|e| bad_input(format!("{file} is not a kind's declaration: {e}")))?;
            show.record(&client.put_kind(&name, &declaration).await?);
            Ok(Exit::Done)
        }
        Command::Kinds(KindsCommand::Delete { name }) => {
            show.record(&client.delete_kind(&name).await?);
            Ok(Exit::Done)
        }
        Command::Workers => {
            show.rows(
                &client.workers().await?,
                &[
                    "name",
                    "kinds",
                    "connected",
                    "holding",
                    "leased",
                    "failed",
                    "last_seen_at",
                ],
            );
            Ok(Exit::Done)
        }
        Command::Schedules(command) => schedules(&client, &show, command).await,
        Command::Periods(PeriodsCommand::Get { month }) => {
            show.record(&client.period(&month).await?);
            Ok(Exit::Done)
        }
        Command::Periods(PeriodsCommand::Reopen { month }) => {
            show.record(&client.reopen_period(&month).await?);
            Ok(Exit::Done)
        }
        Command::FilingEndpoint(FilingCommand::Set { endpoint_url }) => {
            show.record(&client.put_filing_endpoint(&endpoint_url).await?);
            Ok(Exit::Done)
        }
        Command::FilingEndpoint(FilingCommand::Get) => {
            show.record(&client.filing_endpoint().await?);
            Ok(Exit::Done)
        }
    }
}

async fn webhooks(client: &Client, show: &Show, command: WebhooksCommand) -> Result<Exit, Failure> {
    match command {
        WebhooksCommand::Add {
            receiver_url,
            events,
            job_id,
        } => {
            let webhook = NewWebhook {
                url: receiver_url,
                events: (!events.is_empty()).then_some(events),
                job_id,
            };
            show.record(&client.register_webhook(&webhook).await?);
        }
        WebhooksCommand::List => {
            let webhooks: Vec<_> = client.webhooks().try_collect().await?;
            show.rows(&webhooks, &["id", "url", "events", "job_id", "enabled"]);
        }
        WebhooksCommand::Get { webhook_id } => show.record(&client.webhook(&webhook_id).await?),
        WebhooksCommand::Delete { webhook_id } => {
            client.delete_webhook(&webhook_id).await?;
            show.done(&format!("deleted {webhook_id}"));
        }
        WebhooksCommand::Deliveries { webhook_id, limit } => {
            let deliveries: Vec<_> = client
                .deliveries(&webhook_id)
                .take(limit.unwrap_or(usize::MAX))
                .try_collect()
                .await?;
            show.rows(
                &deliveries,
                &[
                    "event_id",
                    "event_type",
                    "attempt",
                    "response_status",
                    "error",
                    "attempted_at",
                ],
            );
        }
        WebhooksCommand::Enable { webhook_id } => {
            show.record(&client.enable_webhook(&webhook_id).await?);
        }
        WebhooksCommand::Rotate { webhook_id } => {
            show.record(&client.rotate_webhook_secret(&webhook_id).await?);
        }
    }
    Ok(Exit::Done)
}

async fn schedules(
    client: &Client,
    show: &Show,
    command: SchedulesCommand,
) -> Result<Exit, Failure> {
    match command {
        SchedulesCommand::List => {
            let schedules: Vec<_> = client.schedules().try_collect().await?;
            show.rows(
                &schedules,
                &[
                    "schedule_id",
                    "kind",
                    "cron",
                    "timezone",
                    "paused",
                    "next_fires",
                ],
            );
        }
        SchedulesCommand::Get { schedule_id } => {
            show.record(&client.schedule(&schedule_id).await?);
        }
        SchedulesCommand::Create(create) => {
            let args::CreateSchedule {
                kind,
                params: pairs,
                params_json,
                cron,
                timezone,
                starts_at,
                ends_at,
                misfire,
                priority,
                key,
            } = *create;
            let mut schedule = NewSchedule::new(
                kind,
                params(params_json.as_deref(), &pairs)?,
                cron,
                timezone,
            );
            schedule.starts_at = starts_at;
            schedule.ends_at = ends_at;
            schedule.misfire = misfire;
            schedule.priority = priority.as_deref().map(priority_named).transpose()?;
            let client = match key.idempotency_key {
                Some(key) => client.with_idempotency_key(key),
                None => client.clone(),
            };
            show.record(&client.create_schedule(&schedule).await?);
        }
        SchedulesCommand::Pause { schedule_id } => {
            show.record(&client.pause_schedule(&schedule_id).await?);
        }
        SchedulesCommand::Resume { schedule_id } => {
            show.record(&client.resume_schedule(&schedule_id).await?);
        }
        SchedulesCommand::Delete { schedule_id } => {
            client.delete_schedule(&schedule_id).await?;
            show.done(&format!("deleted {schedule_id}"));
        }
    }
    Ok(Exit::Done)
}

/// Shows a job just made, or waits for it to end first with `--wait`;
/// the exit says how it ended.
async fn finish(client: &Client, show: &Show, job: Job, wait: &WaitArgs) -> Result<Exit, Failure> {
    if !wait.wait {
        show.job(&job);
        return Ok(Exit::Done);
    }
    let mut progress = show::Progress::new(&job, std::io::stderr().is_terminal());
    let deadline = Duration::from_secs(wait.timeout);
    let ended = client
        .wait_watching(&job.job_id, deadline, Duration::from_secs(2), |job| {
            progress.update(job);
        })
        .await;
    progress.finish();
    let job = match ended {
        Ok(job) => job,
        Err(Error::WaitTimedOut(job)) => {
            show.job(&job);
            return Err(Failure(
                Exit::WaitTimedOut,
                format!(
                    "job {} is still {} after {} s",
                    job.job_id,
                    job.status.as_str(),
                    wait.timeout
                ),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    show.job(&job);
    Ok(match job.status {
        JobStatus::Failed => Exit::JobFailed,
        JobStatus::Cancelled => Exit::JobCancelled,
        _ => Exit::Done,
    })
}

/// The parameters object from `--params-json` and the `--param` pairs.
fn params(json: Option<&str>, pairs: &[String]) -> Result<Value, Failure> {
    let mut params = match json {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(bad_input("--params-json must be a JSON object")),
            Err(e) => return Err(bad_input(format!("--params-json is not JSON: {e}"))),
        },
    };
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(bad_input(format!(
                "--param {pair:?} is not NAME=VALUE (such as month=2026-10)"
            )));
        };
        if name.is_empty() {
            return Err(bad_input(format!("--param {pair:?} has no name")));
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        params.insert(name.to_owned(), value);
    }
    Ok(Value::Object(params))
}

fn priority_named(text: &str) -> Result<Priority, Failure> {
    Priority::parse(text)
        .ok_or_else(|| bad_input(format!("priority {text:?} is not one of high, normal, low")))
}

/// The largest import the service takes; a bigger file is refused before
/// it is read into memory.
const IMPORT_LIMIT: u64 = 16 * 1024 * 1024;

/// Ledger entries from a file (or stdin for `-`): `{"entries": [...]}` or
/// a bare list.
/// A kind's declaration is at most this big (the service's limit).
const DECLARATION_LIMIT: u64 = 64 * 1024;

/// A small file (or stdin, `-`), read whole: a kind's declaration.
async fn read_small(file: &str) -> Result<Vec<u8>, Failure> {
    use tokio::io::AsyncReadExt;
    let mut text = Vec::new();
    let read = if file == "-" {
        tokio::io::stdin()
            .take(DECLARATION_LIMIT + 1)
            .read_to_end(&mut text)
            .await
    } else {
        match tokio::fs::File::open(file).await {
            Ok(f) => f.take(DECLARATION_LIMIT + 1).read_to_end(&mut text).await,
            Err(e) => Err(e),
        }
    };
    read.map_err(|e| bad_input(format!("cannot read {file}: {e}")))?;
    if text.len() as u64 > DECLARATION_LIMIT {
        return Err(bad_input(format!(
            "{file} is over {} KiB, the most a declaration may be",
            DECLARATION_LIMIT / 1024
        )));
    }
    Ok(text)
}

async fn read_entries(file: &str) -> Result<Vec<LedgerEntry>, Failure> {
    use tokio::io::AsyncReadExt;
    let mut text = Vec::new();
    let read = if file == "-" {
        tokio::io::stdin()
            .take(IMPORT_LIMIT + 1)
            .read_to_end(&mut text)
            .await
    } else {
        match tokio::fs::File::open(file).await {
            Ok(f) => f.take(IMPORT_LIMIT + 1).read_to_end(&mut text).await,
            Err(e) => Err(e),
        }
    };
    if let Err(e) = read {
        return Err(bad_input(format!("cannot read {file}: {e}")));
    }
    if text.len() as u64 > IMPORT_LIMIT {
        return Err(bad_input(format!(
            "{file} is larger than the 16 MiB an import takes; split it"
        )));
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Import {
        entries: Vec<LedgerEntry>,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Entries {
        Wrapped(Import),
        Bare(Vec<LedgerEntry>),
    }
    match serde_json::from_slice::<Entries>(&text) {
        Ok(Entries::Wrapped(import)) => Ok(import.entries),
        Ok(Entries::Bare(entries)) => Ok(entries),
        Err(_) => {
            // Untagged errors name no place: decode again as the documented
            // shape for a message that does.
            let error = serde_json::from_slice::<Import>(&text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            Err(bad_input(format!(
                "{file} is not ledger entries ({{\"entries\": [...]}}): {error}"
            )))
        }
    }
}
