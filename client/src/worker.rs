//! A worker over HTTP for a tenant's registered kinds (`docs/workers.md`):
//! it leases due attempts with a long poll, runs each kind's handler,
//! heartbeats each attempt while it runs, stops a handler whose job was
//! cancelled (or whose lease was lost, or whose deadline passed), and
//! reports how each ended, trying a report again with the same token and
//! body when its answer is lost. A 409 on a report is final: the attempt
//! is no longer this worker's. Reports go in batches
//! (`POST /v1/work/reports`): one waits while the previous batch is on its
//! way and goes with the next; a result of another media type, or a JSON
//! one over 64 KiB, goes through its own complete.
//!
//! ```no_run
//! use receipt_client::{Client, Output, WorkError, Worker};
//! use serde_json::json;
//!
//! # async fn run() -> receipt_client::Result<()> {
//! let client = Client::new("http://127.0.0.1:8080", "rk_... (a work key)")?;
//! let worker = Worker::new(client, "reports-1")
//!     .concurrency(4)
//!     .kind("sales-export", |attempt| async move {
//!         let month = attempt.params["month"].as_str().unwrap_or_default().to_owned();
//!         attempt.progress(0.5);
//!         Ok::<Output, WorkError>(json!({"month": month, "rows": 3}).into())
//!     });
//! worker.run(tokio::signal::ctrl_c()).await
//! # }
//! ```

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot},
    task::JoinSet,
};

use crate::{
    AttemptReport, Client, Error, FailRequest, LeaseRequest, LeasedAttempt, ReportAnswer, Result,
    RetryPolicy,
};

/// The longest a lease waits for a due attempt (`docs/api.md`).
const LEASE_WAIT_SECS: u64 = 30;
/// How often an attempt is heartbeaten when its lease's length cannot be
/// told (`JOB_LEASE`'s default is 30 s: three beats in it).
const DEFAULT_BEAT: Duration = Duration::from_secs(10);
/// The first heartbeat of an attempt comes this soon at most.
const FIRST_BEAT: Duration = Duration::from_secs(1);
/// The pause after a lease that failed for good (the service away past the
/// client's deadline, a refusal) before the next.
const LEASE_PAUSE: Duration = Duration::from_secs(1);

/// What a handler produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A JSON result.
    Json(Value),
    /// A result of another media type the kind declares (`text/csv`).
    Bytes {
        /// `type/subtype`.
        media_type: String,
        /// The whole result.
        body: Vec<u8>,
    },
}

impl From<Value> for Output {
    fn from(value: Value) -> Self {
        Output::Json(value)
    }
}

/// How a handler failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkError {
    /// Worth another attempt, after a backoff, while attempts are left.
    #[error("{error_type}: {message}")]
    Retryable {
        /// A short name of the error (letters, digits, `.`, `_`, `-`).
        error_type: String,
        /// What went wrong.
        message: String,
    },
    /// Another attempt would fail the same way: the job fails now.
    #[error("{error_type}: {message}")]
    Permanent {
        /// A short name of the error.
        error_type: String,
        /// What went wrong.
        message: String,
    },
}

impl WorkError {
    /// A failure worth another attempt.
    pub fn retryable(error_type: &str, message: impl Into<String>) -> Self {
        WorkError::Retryable {
            error_type: error_type.to_owned(),
            message: message.into(),
        }
    }

    /// A failure that ends the job.
    pub fn permanent(error_type: &str, message: impl Into<String>) -> Self {
        WorkError::Permanent {
            error_type: error_type.to_owned(),
            message: message.into(),
        }
    }

    fn request(&self) -> FailRequest {
        let (retryable, error_type, message) = match self {
            WorkError::Retryable {
                error_type,
                message,
            } => (true, error_type, message),
            WorkError::Permanent {
                error_type,
                message,
            } => (false, error_type, message),
        };
        FailRequest {
            retryable,
            error_type: Some(error_type.clone()),
            message: message.chars().take(4096).collect(),
            details: None,
        }
    }
}

/// Why an attempt's handler was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A client asked to cancel the job.
    Cancel,
    /// The lease was lost (a heartbeat answered 409).
    Lost,
    /// The attempt's deadline passed.
    Deadline,
}

/// An attempt, as its handler sees it.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The job's id.
    pub job_id: String,
    /// The kind's name.
    pub kind: String,
    /// Which attempt this is, from 1.
    pub attempt: i64,
    /// The job's attempts at most.
    pub max_attempts: i64,
    /// The job's parameters, as submitted.
    pub params: Value,
    /// The W3C trace context of the submit that made the job, if traced.
    pub traceparent: Option<String>,
    progress: Arc<Mutex<Option<f64>>>,
    cancel_requested: Arc<AtomicBool>,
}

impl Attempt {
    /// Reports how far the attempt is, from 0 to 1, with the next
    /// heartbeat.
    pub fn progress(&self, fraction: f64) {
        *self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fraction.clamp(0.0, 1.0));
    }

    /// Whether a client asked to cancel the job. The handler is also
    /// stopped (its future dropped) at its next await once that is known;
    /// a handler that runs long without awaiting checks this.
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::Relaxed)
    }
}

type Handler = Arc<
    dyn Fn(Attempt) -> Pin<Box<dyn Future<Output = std::result::Result<Output, WorkError>> + Send>>
        + Send
        + Sync,
>;

/// A worker of registered kinds; see the module's documentation.
pub struct Worker {
    client: Client,
    name: String,
    concurrency: usize,
    grace: Duration,
    heartbeat_every: Option<Duration>,
    handlers: HashMap<String, Handler>,
}

impl Worker {
    /// A worker named `name` (as the dashboard and its jobs show it),
    /// leasing with `client`, whose key has the `work` scope. One slot
    /// until [`Worker::concurrency`] says otherwise.
    pub fn new(client: Client, name: impl Into<String>) -> Self {
        Worker {
            client,
            name: name.into(),
            concurrency: 1,
            grace: Duration::from_secs(30),
            heartbeat_every: None,
            handlers: HashMap::new(),
        }
    }

    /// Handlers run at once, at most. A slot is free again once its
    /// handler returns, while its report is still on its way; the worker
    /// holds at most twice this many attempts (running, or waiting for
    /// their reports to be taken), so reports that cannot be sent stop its
    /// leasing.
    pub fn concurrency(mut self, slots: usize) -> Self {
        self.concurrency = slots.max(1);
        self
    }

    /// How long a stop waits for running handlers before it leaves them
    /// (their leases lapse, and their attempts run again elsewhere).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often a running attempt is heartbeaten; a third of its lease
    /// by default.
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.heartbeat_every = Some(every);
        self
    }

    /// Runs `handler` for the attempts of kind `name`.
    pub fn kind<F, Fut>(mut self, name: &str, handler: F) -> Self
    where
        F: Fn(Attempt) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Output, WorkError>> + Send + 'static,
    {
        self.handlers.insert(
            name.to_owned(),
            Arc::new(move |attempt| Box::pin(handler(attempt))),
        );
        self
    }

    /// Leases and runs attempts until `stop` completes; then leases no
    /// more, and waits up to the grace for the running ones to end and be
    /// reported.
    pub async fn run(self, stop: impl Future) -> Result<()> {
        if self.handlers.is_empty() {
            return Err(Error::Invalid("a worker needs at least one kind".into()));
        }
        let this = Arc::new(self);
        // Slots are taken by handlers; `held` bounds the attempts held in
        // all, reports on their way included (see `Worker::concurrency`).
        let slots = Arc::new(Semaphore::new(this.concurrency));
        let held = Arc::new(Semaphore::new(2 * this.concurrency));
        let mut running = JoinSet::new();
        let mut kinds: Vec<String> = this.handlers.keys().cloned().collect();
        kinds.sort();
        let reporter = Reporter::start(this.client.clone());
        tokio::pin!(stop);
        loop {
            let first = tokio::select! {
                permits = async {
                    let hold = held.clone().acquire_owned().await?;
                    let slot = slots.clone().acquire_owned().await?;
                    Ok::<_, tokio::sync::AcquireError>((slot, hold))
                } => match permits {
                    Ok(permits) => permits,
                    Err(_) => break,
                },
                _ = &mut stop => break,
            };
            let free = 1 + slots.available_permits().min(held.available_permits());
            let lease = LeaseRequest {
                worker: this.name.clone(),
                kinds: kinds.clone(),
                max: Some(u32::try_from(free.min(100)).unwrap_or(100)),
                wait_secs: Some(LEASE_WAIT_SECS),
            };
            let leased = tokio::select! {
                leased = this.client.lease(&lease) => leased,
                _ = &mut stop => break,
            };
            let attempts = match leased {
                Ok(attempts) => attempts,
                Err(error) => {
                    say(&format!("leasing failed: {error}; leasing again shortly"));
                    drop(first);
                    tokio::select! {
                        () = tokio::time::sleep(LEASE_PAUSE) => continue,
                        _ = &mut stop => break,
                    }
                }
            };
            let mut first = Some(first);
            for leased in attempts {
                let (slot, hold) = match first.take() {
                    Some(permits) => permits,
                    None => match (
                        slots.clone().try_acquire_owned(),
                        held.clone().try_acquire_owned(),
                    ) {
                        (Ok(slot), Ok(hold)) => (slot, hold),
                        // The service never leases more than asked.
                        _ => break,
                    },
                };
                let this = this.clone();
                let reporter = Some(reporter.clone());
                running.spawn(async move {
                    this.run_attempt(leased, reporter, slot).await;
                    drop(hold);
                });
            }
            while running.try_join_next().is_some() {}
        }
        let drained = tokio::time::timeout(this.grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // Their leases lapse: each attempt runs again elsewhere.
            running.abort_all();
        }
        Ok(())
    }

    /// Runs one attempt to its report (sent with others by `reporter`
    /// when it can go in a batch); its `slot` is let go once the handler
    /// has returned.
    async fn run_attempt(
        &self,
        leased: LeasedAttempt,
        reporter: Option<Reporter>,
        slot: OwnedSemaphorePermit,
    ) {
        let Some(handler) = self.handlers.get(&leased.kind).cloned() else {
            return;
        };
        let attempt = Attempt {
            job_id: leased.job_id.clone(),
            kind: leased.kind.clone(),
            attempt: leased.attempt,
            max_attempts: leased.max_attempts,
            params: leased.params.clone(),
            traceparent: leased.traceparent.clone(),
            progress: Arc::default(),
            cancel_requested: Arc::default(),
        };
        let token = leased.token.clone();
        let work = handler(attempt.clone());
        let outcome = tokio::select! {
            outcome = work => Ok(outcome),
            stop = self.watch(&leased, &attempt) => Err(stop),
        };
        drop(slot);
        let timeout = || WorkError::retryable("timeout", "the attempt ran past its deadline");
        let batched = match &outcome {
            Ok(Ok(Output::Json(result)))
                if serde_json::to_vec(result)
                    .is_ok_and(|bytes| bytes.len() <= MOST_RESULT_IN_BATCH) =>
            {
                Some(AttemptReport::Complete {
                    token: token.clone(),
                    result: result.clone(),
                    traceparent: None,
                })
            }
            Ok(Ok(_)) => None,
            Ok(Err(failure)) => Some(fail_report(&token, failure)),
            Err(Stop::Cancel) => Some(AttemptReport::Cancelled {
                token: token.clone(),
                traceparent: None,
            }),
            Err(Stop::Deadline) => Some(fail_report(&token, &timeout())),
            Err(Stop::Lost) => None,
        };
        let answered = match (batched, &reporter) {
            (Some(report), Some(reporter)) => reporter.report(report).await,
            _ => None,
        };
        let report = match (answered, outcome) {
            (Some(answer), _) => answer,
            (None, Ok(Ok(Output::Json(result)))) => self.client.complete(&token, &result).await,
            (None, Ok(Ok(Output::Bytes { media_type, body }))) => {
                self.client.complete_with(&token, &media_type, body).await
            }
            (None, Ok(Err(failure))) => self.client.fail(&token, &failure.request()).await,
            (None, Err(Stop::Cancel)) => self.client.report_cancelled(&token).await,
            (None, Err(Stop::Deadline)) => self.client.fail(&token, &timeout().request()).await,
            // Another attempt holds the job: nothing to report.
            (None, Err(Stop::Lost)) => return,
        };
        if let Err(error) = report {
            say(&format!(
                "the report of attempt {} of job {} was not taken: {error}",
                leased.attempt, leased.job_id
            ));
        }
    }

    /// Heartbeats the attempt until it must stop, and says why.
    async fn watch(&self, leased: &LeasedAttempt, attempt: &Attempt) -> Stop {
        let now = shared::time::now_ms();
        let every = self.heartbeat_every.unwrap_or_else(|| {
            shared::time::parse_rfc3339(&leased.lease_expires_at)
                .map(|until| until - now)
                .filter(|ms| (1_000..=3_600_000).contains(ms))
                .map_or(DEFAULT_BEAT, |ms| Duration::from_millis((ms / 3) as u64))
        });
        let until_deadline = shared::time::parse_rfc3339(&leased.deadline)
            .map_or(Duration::MAX, |at| {
                Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
            });
        let deadline = tokio::time::sleep(until_deadline);
        tokio::pin!(deadline);
        // A heartbeat must come back within its beat: it retries quickly,
        // and a lease it cannot extend lapses on its own.
        let beats = Client {
            retry: RetryPolicy {
                deadline: every,
                first_backoff: Duration::from_millis(100),
                max_backoff: every / 4,
                ..self.client.retry
            },
            ..self.client.clone()
        };
        // The first beat soon: it takes the lease up (a lease never taken
        // up is handed back when it lapses, as one whose answer was lost on
        // the way). Not at once: an attempt done within the second takes
        // it up with its report, one call fewer.
        let mut next = every.min(FIRST_BEAT);
        loop {
            tokio::select! {
                () = &mut deadline => return Stop::Deadline,
                () = tokio::time::sleep(next) => {}
            }
            next = every;
            let progress = *attempt
                .progress
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match beats.heartbeat(&leased.token, progress).await {
                Ok(beat) if beat.cancel_requested => {
                    attempt.cancel_requested.store(true, Ordering::Relaxed);
                    return Stop::Cancel;
                }
                Ok(_) => {}
                Err(Error::Api { problem, .. }) if problem.status == 409 => return Stop::Lost,
                Err(error) => say(&format!(
                    "a heartbeat of job {} failed: {error}",
                    leased.job_id
                )),
            }
        }
    }
}

/// A JSON result over this goes alone, through the attempt's own complete.
const MOST_RESULT_IN_BATCH: usize = 64 * 1024;
/// Reports one call carries at most, and the bytes of their results.
const MOST_REPORTS: usize = 100;
const MOST_BATCH_BYTES: usize = 960 * 1024;

fn fail_report(token: &str, failure: &WorkError) -> AttemptReport {
    let FailRequest {
        retryable,
        error_type,
        message,
        details,
    } = failure.request();
    AttemptReport::Fail {
        token: token.to_owned(),
        retryable,
        error_type,
        message,
        details,
        traceparent: None,
    }
}

/// A report's own answer (`None`: the batch was refused as a whole, and
/// the report goes alone).
type Answered = Option<Result<ReportAnswer>>;

/// Reports sent together (`POST /v1/work/reports`): a report waits while
/// the previous batch is on its way and goes with the next, so a busy
/// worker sends one call for many attempts and an idle one sends each at
/// once. Each is answered as its own call would be.
#[derive(Clone)]
struct Reporter {
    queue: mpsc::UnboundedSender<(AttemptReport, oneshot::Sender<Answered>)>,
}

impl Reporter {
    /// The reporter's task ends when the last of its handles is dropped.
    fn start(client: Client) -> Self {
        let (queue, mut reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(first) = reports.recv().await {
                let mut batch: Vec<(AttemptReport, oneshot::Sender<Answered>)> = vec![first];
                let mut bytes = 0;
                while batch.len() < MOST_REPORTS && bytes < MOST_BATCH_BYTES {
                    match reports.try_recv() {
                        Ok(next) => {
                            bytes += serde_json::to_vec(&next.0).map_or(0, |json| json.len());
                            batch.push(next);
                        }
                        Err(_) => break,
                    }
                }
                let (sent, waiting): (Vec<AttemptReport>, Vec<oneshot::Sender<Answered>>) =
                    batch.into_iter().unzip();
                let tokens: Vec<String> = sent.iter().map(|r| r.token().to_owned()).collect();
                match client.report(sent).await {
                    Ok(answers) if answers.len() == waiting.len() => {
                        for ((answer, waiter), token) in
                            answers.into_iter().zip(waiting).zip(tokens)
                        {
                            let _ = waiter.send((answer.token == token).then(|| answer_of(answer)));
                        }
                    }
                    // Refused as a whole (an api without the route, say):
                    // each goes alone.
                    Ok(_) | Err(Error::Api { .. }) | Err(Error::Unexpected(_)) => {
                        for waiter in waiting {
                            let _ = waiter.send(None);
                        }
                    }
                    Err(error) => {
                        let error = error.to_string();
                        for waiter in waiting {
                            let _ = waiter.send(Some(Err(Error::Unexpected(error.clone()))));
                        }
                    }
                }
            }
        });
        Reporter { queue }
    }

    async fn report(&self, report: AttemptReport) -> Answered {
        let (answer, answered) = oneshot::channel();
        self.queue.send((report, answer)).ok()?;
        answered.await.ok().flatten()
    }
}

/// A report's answer in a batch, as its own call's.
fn answer_of(answer: crate::ReportOutcome) -> Result<ReportAnswer> {
    if answer.status == 200 {
        return serde_json::from_value(answer.body)
            .map_err(|e| Error::Unexpected(format!("a report's answer: {e}")));
    }
    let problem = serde_json::from_value(answer.body)
        .map_err(|e| Error::Unexpected(format!("a report's problem: {e}")))?;
    Err(Error::Api {
        problem: Box::new(problem),
        retry_after: None,
    })
}

/// The client logs nothing of its own: a worker's warnings go to stderr.
fn say(message: &str) {
    eprintln!("receipt worker: {message}");
}
