//! The Rust client of Receipt's HTTP API (`docs/api.md`), which does the
//! client's part of Receipt's promise, "a job accepted is never lost and
//! never done twice", by itself:
//!
//! - **One idempotency key per intent.** Every call that changes something
//!   makes one `Idempotency-Key` (or takes the caller's, see
//!   [`Client::with_idempotency_key`] and [`Submit::idempotency_key`]) and
//!   sends that same key on every try, so a try whose answer was lost is
//!   answered by the service with the job the first try made.
//! - **Retries where a retry can help, never where it cannot.** A refused
//!   or cut connection, a timeout, a 5xx, a 429 or a 409 for a key still
//!   in progress (the 409 with `Retry-After`) is tried again after an
//!   exponential backoff with jitter, no sooner than the answer's
//!   `Retry-After`, until the call's deadline ([`RetryPolicy`]). Any other
//!   4xx needs a change of request and comes back at once as
//!   [`Error::Api`], with the service's problem document.
//! - **Long polls that reconnect**: [`Client::wait`] holds `?wait=`
//!   requests open until the job ends or the deadline passes.
//! - **Every page**: the lists ([`Client::jobs`], [`Client::webhooks`],
//!   [`Client::schedules`], [`Client::deliveries`]) are streams that follow
//!   the cursors.
//! - **Every try in sight**: [`ClientBuilder::on_try`] is told of each
//!   try, how long it took and whether another follows, so a program can
//!   count the retries made for it or time requests apart from the pauses
//!   between them; [`RetryPolicy::single_try`] sends each request once.
//!
//! ```no_run
//! use std::time::Duration;
//! use receipt_client::{Client, GstSummary};
//!
//! # async fn run() -> receipt_client::Result<()> {
//! let client = Client::new("http://127.0.0.1:8080", "rk_...")?;
//! let job = client.submit(GstSummary { month: "2026-10".into() }).await?;
//! let job = client.wait(&job.job_id, Duration::from_secs(300)).await?;
//! let summary = client.result(&job.job_id).await?;
//! println!("{}", summary["net_payable"]["total"]);
//! # Ok(())
//! # }
//! ```
//!
//! Receivers of webhooks check them with [`WebhookVerifier`].

#![warn(missing_docs)]
mod error;
mod objects;
mod reports;
mod webhooks;
mod worker;

use std::{
    fmt,
    future::Future,
    ops::ControlFlow,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Stream, TryStreamExt, stream};
use reqwest::{
    Method, StatusCode, Url,
    header::{HeaderMap, HeaderValue},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};

pub use error::{Error, FieldError, Problem, Result};
pub use objects::{NewSchedule, NewWebhook, Page};
pub use reports::{GstSummary, LedgerExport, PeriodClose, Report, Sleep, Submit};
pub use shared::ledger::LedgerEntryInput as LedgerEntry;
pub use shared::model::{
    JobErrorObject as JobError, JobObject as Job, JobStatus, Priority, StepObject, WaitReason,
    WaitingObject,
};
pub use shared::objects::{
    DeliveryObject as Delivery, FilingEndpointObject as FilingEndpoint,
    ImportResponse as ImportOutcome, PeriodObject as Period, ScheduleObject as Schedule,
    WebhookObject as Webhook,
};
pub use shared::work::{
    AttemptReport, DeletedKind, FailRequest, HeartbeatAnswer, KindDeclaration, KindObject as Kind,
    LeaseRequest, LeasedAttemptObject as LeasedAttempt, ReportAnswer, ReportOutcome,
    WorkerObject as WorkerInfo,
};
use shared::work::{
    HeartbeatRequest, KindList, LeaseAnswer, ReportsAnswer, ReportsRequest, WorkerList,
};
pub use webhooks::{Rejection, WebhookVerifier};
pub use worker::{Attempt, Output, WorkError, Worker};

/// The longest `?wait=` the service holds a long poll (`docs/api.md`).
const LONGEST_POLL: Duration = Duration::from_secs(60);

/// How long a call may take in all, and how its tries are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// A call gives up, with the last try's error, rather than start a
    /// pause that would end after this much time since it began.
    pub deadline: Duration,
    /// The pause after the first failed try; it doubles after each, with
    /// equal jitter (half fixed, half random), up to `max_backoff`. An
    /// answer's `Retry-After` makes the pause at least that long.
    pub first_backoff: Duration,
    /// The longest pause between two tries.
    pub max_backoff: Duration,
    /// How long one try may wait for its whole answer (a long poll gets
    /// its `?wait=` on top).
    pub try_timeout: Duration,
    /// At most this many tries of a call, the first included (`None`: as
    /// many as the deadline allows; `Some(0)` is taken as `Some(1)`).
    pub max_tries: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(120),
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            try_timeout: Duration::from_secs(30),
            max_tries: None,
        }
    }
}

impl RetryPolicy {
    /// Each request sent once: a failure comes back at once, as the error
    /// of its one try (a 503 with its `Retry-After`, no answer at all).
    /// For a program that measures the service, where a retry would hide
    /// a failure inside a slower answer. To try an intent again itself, the
    /// caller names its key ([`Submit::idempotency_key`],
    /// [`Client::with_idempotency_key`]).
    pub fn single_try() -> Self {
        RetryPolicy {
            max_tries: Some(1),
            ..RetryPolicy::default()
        }
    }

    /// Whether try number `tries` (from 1) was the last one allowed.
    fn last_try(&self, tries: u32) -> bool {
        self.max_tries.is_some_and(|max| tries >= max.max(1))
    }
}

/// One try of a call, as [`ClientBuilder::on_try`] is told of it once the
/// try is over: its request, how long it took, how it failed, and whether
/// the call goes on.
#[derive(Debug)]
#[non_exhaustive]
pub struct TryReport<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's URL (the API key is not in it).
    pub url: &'a Url,
    /// The try's number within its call, from 1: above 1, a retry.
    pub number: u32,
    /// From sending the request until its answer was read whole (or the
    /// try failed); the pause before it is not counted.
    pub took: Duration,
    /// Why the try failed; `None` when its answer was the call's.
    pub error: Option<&'a Error>,
    /// The pause before the next try when the call goes on; `None` when
    /// this try ended the call.
    pub next_try_in: Option<Duration>,
}

/// What [`ClientBuilder::on_try`] runs.
#[derive(Clone)]
struct OnTry(Arc<dyn Fn(&TryReport<'_>) + Send + Sync>);

impl fmt::Debug for OnTry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnTry(..)")
    }
}

/// The format of a result streamed with [`Client::stream_result`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFormat {
    /// JSON, which every kind answers.
    Json,
    /// CSV, for a tabular kind (`ledger-export`); other kinds answer JSON
    /// whatever is asked.
    Csv,
}

/// Which jobs [`Client::jobs`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs in this status.
    pub status: Option<JobStatus>,
    /// Only jobs of this kind (an unknown kind lists nothing).
    pub kind: Option<String>,
    /// Only the jobs this schedule made (not combined with the others).
    pub schedule_id: Option<String>,
    /// Jobs a page, 1 to 200 (the service's default, 50, when `None`).
    pub page_size: Option<u32>,
}

/// A client of one Receipt service, as one tenant (its API key). Cheap to
/// clone: clones share their connections.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    authorization: HeaderValue,
    retry: RetryPolicy,
    on_try: Option<OnTry>,
    /// The caller's key for the next change, instead of a fresh one.
    idempotency_key: Option<String>,
}

/// Builds a [`Client`] with settings other than the defaults.
#[derive(Debug)]
pub struct ClientBuilder {
    base_url: String,
    api_key: String,
    http: Option<reqwest::Client>,
    retry: RetryPolicy,
    on_try: Option<OnTry>,
}

impl ClientBuilder {
    /// The HTTP client to send with (a proxy, TLS roots, pool settings of
    /// the caller's).
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// How calls are tried again ([`RetryPolicy::default`] otherwise).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Runs `hook` after every try of every call of the client (and of its
    /// clones), on the task that made it: keep it short. It sees what no
    /// answer shows: the retries made on the caller's behalf, and each
    /// try's own time.
    ///
    /// ```
    /// use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
    /// use receipt_client::Client;
    ///
    /// let retries = Arc::new(AtomicU64::new(0));
    /// let counted = retries.clone();
    /// let client = Client::builder("http://127.0.0.1:8080", "rk_...")
    ///     .on_try(move |report| {
    ///         if report.number > 1 {
    ///             counted.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///     })
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), receipt_client::Error>(())
    /// ```
    pub fn on_try(mut self, hook: impl Fn(&TryReport<'_>) + Send + Sync + 'static) -> Self {
        self.on_try = Some(OnTry(Arc::new(hook)));
        self
    }

    /// The client; [`Error::Invalid`] for a base URL that is not an http
    /// or https URL, or a key that cannot be a header.
    pub fn build(self) -> Result<Client> {
        let mut base = Url::parse(&self.base_url)
            .map_err(|e| Error::Invalid(format!("the URL {:?} is not one: {e}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::Invalid(format!(
                "the URL {:?} is not an http or https URL",
                self.base_url
            )));
        }
        if let Ok(mut segments) = base.path_segments_mut() {
            segments.pop_if_empty();
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", self.api_key))
            .map_err(|_| Error::Invalid("the API key is not printable ASCII".into()))?;
        authorization.set_sensitive(true);
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .user_agent(concat!("receipt-client/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| Error::Invalid(format!("the HTTP client: {e}")))?,
        };
        Ok(Client {
            http,
            base,
            authorization,
            retry: self.retry,
            on_try: self.on_try,
            idempotency_key: None,
        })
    }
}

/// One request of a call, as sent on every try.
struct Call {
    method: Method,
    url: Url,
    body: Option<Vec<u8>>,
    /// The body's media type (`application/json` unless said).
    content_type: Option<String>,
    idempotency_key: Option<String>,
    accept: Option<&'static str>,
    /// More time for each try than the policy's (a long poll's wait).
    longer_try: Duration,
    /// A `DELETE`: a 404 on a try after one whose answer was lost means
    /// the first try deleted it.
    gone_is_done: bool,
}

/// What one try came to.
enum Try<T> {
    Done(T),
    /// Worth trying again, no sooner than the answer's `Retry-After`.
    Again(Error, Option<Duration>),
    Fail(Error),
}

/// An answer read whole.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

impl Client {
    /// A client of the service at `base_url` (`http://127.0.0.1:8080`),
    /// sending `api_key`, with the default [`RetryPolicy`].
    pub fn new(base_url: &str, api_key: &str) -> Result<Client> {
        Self::builder(base_url, api_key).build()
    }

    /// A client of `base_url` sending `api_key`, with settings of the
    /// caller's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use receipt_client::{Client, RetryPolicy};
    ///
    /// let client = Client::builder("http://127.0.0.1:8080", "rk_...")
    ///     .retry(RetryPolicy { deadline: Duration::from_secs(30), ..RetryPolicy::default() })
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), receipt_client::Error>(())
    /// ```
    pub fn builder(base_url: &str, api_key: &str) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.to_owned(),
            api_key: api_key.to_owned(),
            http: None,
            retry: RetryPolicy::default(),
            on_try: None,
        }
    }

    /// A client from `RECEIPT_URL` (default `http://127.0.0.1:8080`) and
    /// `RECEIPT_API_KEY`.
    pub fn from_env() -> Result<Client> {
        let url =
            std::env::var("RECEIPT_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned());
        let key = std::env::var("RECEIPT_API_KEY")
            .map_err(|_| Error::Invalid("RECEIPT_API_KEY is not set".into()))?;
        Self::new(&url, &key)
    }

    /// This client, sending `key` as the `Idempotency-Key` of the changes
    /// it makes instead of a fresh key per call. Give a key that outlives
    /// the process (a schedule's name, an order number) when a restarted
    /// program may make the same change again: the service answers the
    /// second time with what the first did.
    ///
    /// ```no_run
    /// # async fn run(client: receipt_client::Client) -> receipt_client::Result<()> {
    /// let job = client.with_idempotency_key("retry-of-order-1234").retry("job_...").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_idempotency_key(&self, key: impl Into<String>) -> Client {
        Client {
            idempotency_key: Some(key.into()),
            ..self.clone()
        }
    }

    /// The retry policy calls follow.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    // ----- jobs -----

    /// Submits a report: a built-in kind's typed parameters
    /// (`GstSummary { .. }`), or a [`Submit`] for any kind, a start time,
    /// a priority or a key of the caller's. Answers the job, `QUEUED`; the
    /// same intent sent again answers the same job.
    pub async fn submit(&self, submit: impl Into<Submit>) -> Result<Job> {
        let submit = submit.into();
        let mut url = self.url(&["v1", "reports", &submit.kind]);
        url.query_pairs_mut().extend_pairs(submit.query());
        let key = submit
            .idempotency_key
            .clone()
            .unwrap_or_else(|| self.intent_key());
        let call = Call {
            idempotency_key: Some(key),
            ..Call::new(Method::POST, url).json(&submit.params)?
        };
        self.json(call).await
    }

    /// The job now.
    pub async fn job(&self, job_id: &str) -> Result<Job> {
        self.json(Call::new(Method::GET, self.url(&["v1", "jobs", job_id])))
            .await
    }

    /// Waits for the job to end (`SUCCEEDED`, `FAILED` or `CANCELLED`)
    /// with long polls, reconnecting as needed, for at most `deadline`;
    /// [`Error::WaitTimedOut`] (with the job as last seen) after that.
    pub async fn wait(&self, job_id: &str, deadline: Duration) -> Result<Job> {
        self.wait_watching(job_id, deadline, LONGEST_POLL, |_| {})
            .await
    }

    /// [`Client::wait`], answering at least every `every` (at most 60 s,
    /// in whole seconds, rounded up) with the job as it is then, for
    /// `watch` (a progress bar).
    pub async fn wait_watching(
        &self,
        job_id: &str,
        deadline: Duration,
        every: Duration,
        mut watch: impl FnMut(&Job),
    ) -> Result<Job> {
        let started = Instant::now();
        loop {
            let left = deadline.saturating_sub(started.elapsed());
            // The service holds a long poll for whole seconds: a part of a
            // second is rounded up (a poll without `wait` would answer at
            // once, and the next one too, until the deadline).
            let wait = every.min(LONGEST_POLL).min(left).as_secs_f64().ceil() as u64;
            let mut url = self.url(&["v1", "jobs", job_id]);
            if wait > 0 {
                url.query_pairs_mut().append_pair("wait", &wait.to_string());
            }
            let call = Call {
                longer_try: Duration::from_secs(wait),
                ..Call::new(Method::GET, url)
            };
            let job: Job = self.json(call).await?;
            watch(&job);
            if job.status.is_final() {
                return Ok(job);
            }
            if started.elapsed() >= deadline {
                return Err(Error::WaitTimedOut(Box::new(job)));
            }
        }
    }

    /// A `SUCCEEDED` job's result, as JSON (read whole: stream a big one
    /// with [`Client::stream_result`]).
    pub async fn result(&self, job_id: &str) -> Result<Value> {
        self.result_as(job_id).await
    }

    /// A `SUCCEEDED` job's result, decoded into `T`.
    pub async fn result_as<T: DeserializeOwned>(&self, job_id: &str) -> Result<T> {
        let call = Call {
            accept: Some("application/json"),
            ..Call::new(Method::GET, self.url(&["v1", "jobs", job_id, "result"]))
        };
        self.json(call).await
    }

    /// Streams a `SUCCEEDED` job's result into `writer` as it arrives, in
    /// `format`, and answers the bytes written. Tries that fail before
    /// the first byte are tried again as any call; an answer cut short
    /// after that is [`Error::Interrupted`] (the writer holds part of the
    /// document), to be asked again into a fresh writer.
    ///
    /// ```no_run
    /// # async fn run(client: receipt_client::Client) -> receipt_client::Result<()> {
    /// use receipt_client::ResultFormat;
    /// let mut file = tokio::fs::File::create("october.csv").await?;
    /// client.stream_result("job_...", ResultFormat::Csv, &mut file).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn stream_result<W: AsyncWrite + Unpin>(
        &self,
        job_id: &str,
        format: ResultFormat,
        writer: &mut W,
    ) -> Result<u64> {
        let call = Call {
            accept: Some(match format {
                ResultFormat::Json => "application/json",
                ResultFormat::Csv => "text/csv",
            }),
            ..Call::new(Method::GET, self.url(&["v1", "jobs", job_id, "result"]))
        };
        let mut tries = Tries::new(self, &call);
        let written = loop {
            let (remaining, _) = tries.begin();
            let outcome = self.try_streaming(&call, remaining, writer).await;
            if let ControlFlow::Break(written) = tries.end(outcome).await {
                break written?;
            }
        };
        writer.flush().await?;
        Ok(written)
    }

    /// One try of [`Client::stream_result`].
    async fn try_streaming<W: AsyncWrite + Unpin>(
        &self,
        call: &Call,
        remaining: Duration,
        writer: &mut W,
    ) -> Try<u64> {
        let mut response = match self.request(call, remaining).send().await {
            Ok(response) => response,
            Err(e) => return Try::Again(Error::Transport(e), None),
        };
        if !response.status().is_success() {
            let status = response.status();
            let retry_after = retry_after(response.headers());
            return match response.bytes().await {
                Ok(body) => refusal(status, &body, retry_after),
                Err(e) => Try::Again(Error::Transport(e), None),
            };
        }
        let mut written = 0u64;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if let Err(e) = writer.write_all(&chunk).await {
                        return Try::Fail(Error::Io(e));
                    }
                    written += chunk.len() as u64;
                }
                Ok(None) => return Try::Done(written),
                Err(e) if written == 0 => return Try::Again(Error::Transport(e), None),
                Err(source) => return Try::Fail(Error::Interrupted { written, source }),
            }
        }
    }

    /// Cancels a job: a `QUEUED` one at once, a `RUNNING` one at its next
    /// checkpoint (`cancel_requested`); answers the job.
    pub async fn cancel(&self, job_id: &str) -> Result<Job> {
        self.change(Method::POST, &["v1", "jobs", job_id, "cancel"], None::<&()>)
            .await
    }

    /// Retries a `FAILED` or `CANCELLED` job as a new job (its
    /// `retry_of` names this one); answers the new job.
    pub async fn retry(&self, job_id: &str) -> Result<Job> {
        self.change(Method::POST, &["v1", "jobs", job_id, "retry"], None::<&()>)
            .await
    }

    /// One page of jobs, newest first, from `cursor` (the previous page's
    /// `next_cursor`; `None` for the first).
    pub async fn jobs_page(&self, filter: &JobFilter, cursor: Option<&str>) -> Result<Page<Job>> {
        let mut url = self.url(&["v1", "jobs"]);
        {
            let mut query = url.query_pairs_mut();
            if let Some(status) = filter.status {
                query.append_pair("status", status.as_str());
            }
            if let Some(kind) = &filter.kind {
                query.append_pair("kind", kind);
            }
            if let Some(schedule_id) = &filter.schedule_id {
                query.append_pair("schedule_id", schedule_id);
            }
            if let Some(size) = filter.page_size {
                query.append_pair("limit", &size.to_string());
            }
            if let Some(cursor) = cursor {
                query.append_pair("cursor", cursor);
            }
        }
        self.json(Call::new(Method::GET, url)).await
    }

    /// Every job `filter` selects, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: receipt_client::Client) -> receipt_client::Result<()> {
    /// use futures::TryStreamExt;
    /// use receipt_client::{JobFilter, JobStatus};
    /// let failed = JobFilter { status: Some(JobStatus::Failed), ..Default::default() };
    /// let jobs: Vec<_> = client.jobs(failed).try_collect().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn jobs(&self, filter: JobFilter) -> impl Stream<Item = Result<Job>> + '_ {
        paged(move |cursor| {
            let filter = filter.clone();
            async move { self.jobs_page(&filter, cursor.as_deref()).await }
        })
    }

    // ----- ledger -----

    /// Imports ledger entries, all or nothing (at most 10,000 a call). An
    /// entry whose `id` is known with the same content is skipped, so an
    /// import sent twice stores each entry once.
    pub async fn import_ledger(&self, entries: &[LedgerEntry]) -> Result<ImportOutcome> {
        #[derive(Serialize)]
        struct Import<'a> {
            entries: &'a [LedgerEntry],
        }
        self.change(
            Method::POST,
            &["v1", "ledger", "entries"],
            Some(&Import { entries }),
        )
        .await
    }

    // ----- webhooks -----

    /// Registers a webhook; the answer holds its `secret`, shown only
    /// here.
    pub async fn register_webhook(&self, webhook: &NewWebhook) -> Result<Webhook> {
        self.change(Method::POST, &["v1", "webhooks"], Some(webhook))
            .await
    }

    /// One webhook (without its secret).
    pub async fn webhook(&self, webhook_id: &str) -> Result<Webhook> {
        self.json(Call::new(
            Method::GET,
            self.url(&["v1", "webhooks", webhook_id]),
        ))
        .await
    }

    /// Every webhook of the tenant, newest first.
    pub fn webhooks(&self) -> impl Stream<Item = Result<Webhook>> + '_ {
        paged(move |cursor| self.page(vec!["v1".into(), "webhooks".into()], cursor))
    }

    /// Deletes a webhook (its pending events are dropped).
    pub async fn delete_webhook(&self, webhook_id: &str) -> Result<()> {
        self.delete(&["v1", "webhooks", webhook_id]).await
    }

    /// Every delivery attempt of a webhook, newest first.
    pub fn deliveries(&self, webhook_id: &str) -> impl Stream<Item = Result<Delivery>> + '_ {
        let segments: Vec<String> = ["v1", "webhooks", webhook_id, "deliveries"]
            .map(str::to_owned)
            .into();
        paged(move |cursor| self.page(segments.clone(), cursor))
    }

    /// Enables a webhook again after a receiver's 410 disabled it.
    pub async fn enable_webhook(&self, webhook_id: &str) -> Result<Webhook> {
        self.change(
            Method::POST,
            &["v1", "webhooks", webhook_id, "enable"],
            None::<&()>,
        )
        .await
    }

    /// Gives a webhook a new secret (in the answer, and only there); the
    /// old one stops signing at once, so receivers should accept both
    /// for a while ([`WebhookVerifier::also_accept`]).
    pub async fn rotate_webhook_secret(&self, webhook_id: &str) -> Result<Webhook> {
        self.change(
            Method::POST,
            &["v1", "webhooks", webhook_id, "rotate-secret"],
            None::<&()>,
        )
        .await
    }

    // ----- months and filing -----

    /// Sets (or replaces) the tenant's filing endpoint, where
    /// `period-close` files returns; the answer holds its `secret`.
    pub async fn put_filing_endpoint(&self, url: &str) -> Result<FilingEndpoint> {
        self.change(
            Method::PUT,
            &["v1", "filing-endpoint"],
            Some(&serde_json::json!({ "url": url })),
        )
        .await
    }

    /// The filing endpoint (without its secret); 404 before the first
    /// [`Client::put_filing_endpoint`].
    pub async fn filing_endpoint(&self) -> Result<FilingEndpoint> {
        self.json(Call::new(Method::GET, self.url(&["v1", "filing-endpoint"])))
            .await
    }

    /// A month's state (`YYYY-MM`): `open`, `locked` or `closed`.
    pub async fn period(&self, month: &str) -> Result<Period> {
        self.json(Call::new(Method::GET, self.url(&["v1", "periods", month])))
            .await
    }

    /// Makes a closed month open again, so imports into it are accepted.
    pub async fn reopen_period(&self, month: &str) -> Result<Period> {
        self.change(
            Method::POST,
            &["v1", "periods", month, "reopen"],
            None::<&()>,
        )
        .await
    }

    // ----- schedules -----

    /// Creates a schedule; each of its fires makes exactly one job. A
    /// schedule the service refuses (a bad cron, zone or params template)
    /// is a 422 naming the member.
    pub async fn create_schedule(&self, schedule: &NewSchedule) -> Result<Schedule> {
        self.change(Method::POST, &["v1", "schedules"], Some(schedule))
            .await
    }

    /// One schedule, with its next fires.
    pub async fn schedule(&self, schedule_id: &str) -> Result<Schedule> {
        self.json(Call::new(
            Method::GET,
            self.url(&["v1", "schedules", schedule_id]),
        ))
        .await
    }

    /// Every schedule of the tenant, newest first.
    pub fn schedules(&self) -> impl Stream<Item = Result<Schedule>> + '_ {
        paged(move |cursor| self.page(vec!["v1".into(), "schedules".into()], cursor))
    }

    /// Changes the members `change` holds (`{"cron": "0 7 1 * *"}`;
    /// `null` removes `starts_at` or `ends_at`).
    pub async fn change_schedule(&self, schedule_id: &str, change: &Value) -> Result<Schedule> {
        // A PATCH that sets members is idempotent by itself: no key.
        let call =
            Call::new(Method::PATCH, self.url(&["v1", "schedules", schedule_id])).json(change)?;
        self.json(call).await
    }

    /// Pauses a schedule: no fire makes a job until it is resumed.
    pub async fn pause_schedule(&self, schedule_id: &str) -> Result<Schedule> {
        self.change(
            Method::POST,
            &["v1", "schedules", schedule_id, "pause"],
            None::<&()>,
        )
        .await
    }

    /// Resumes a schedule from its first fire after now.
    pub async fn resume_schedule(&self, schedule_id: &str) -> Result<Schedule> {
        self.change(
            Method::POST,
            &["v1", "schedules", schedule_id, "resume"],
            None::<&()>,
        )
        .await
    }

    /// Deletes a schedule; the jobs it made stay.
    pub async fn delete_schedule(&self, schedule_id: &str) -> Result<()> {
        self.delete(&["v1", "schedules", schedule_id]).await
    }

    // ----- registered kinds and workers -----

    /// Every kind the tenant may submit: the built-in ones, then its
    /// registered ones.
    pub async fn kinds(&self) -> Result<Vec<Kind>> {
        let list: KindList = self
            .json(Call::new(Method::GET, self.url(&["v1", "kinds"])))
            .await?;
        Ok(list.kinds)
    }

    /// One kind, built in or registered.
    pub async fn kind(&self, name: &str) -> Result<Kind> {
        self.json(Call::new(Method::GET, self.url(&["v1", "kinds", name])))
            .await
    }

    /// Registers a kind, or changes it; the same declaration again changes
    /// nothing.
    pub async fn put_kind(&self, name: &str, declaration: &KindDeclaration) -> Result<Kind> {
        self.change(Method::PUT, &["v1", "kinds", name], Some(declaration))
            .await
    }

    /// Deletes a registered kind: how many of its jobs are still queued
    /// or running (its workers keep leasing them).
    pub async fn delete_kind(&self, name: &str) -> Result<DeletedKind> {
        let call = Call::new(Method::DELETE, self.url(&["v1", "kinds", name]));
        self.json(call).await
    }

    /// The tenant's workers over HTTP, the last seen first.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let list: WorkerList = self
            .json(Call::new(Method::GET, self.url(&["v1", "workers"])))
            .await?;
        Ok(list.workers)
    }

    // ----- the worker protocol (a key with the `work` scope) -----

    /// Leases due attempts (`docs/api.md`, Workers over HTTP), waiting up
    /// to `wait_secs` for one.
    pub async fn lease(&self, lease: &LeaseRequest) -> Result<Vec<LeasedAttempt>> {
        let call = Call {
            longer_try: Duration::from_secs(lease.wait_secs.unwrap_or(0)),
            ..Call::new(Method::POST, self.url(&["v1", "work", "lease"])).json(lease)?
        };
        let answer: LeaseAnswer = self.json(call).await?;
        Ok(answer.attempts)
    }

    /// Extends an attempt's lease and reports its progress; the answer
    /// says whether a cancel was asked for. A 409 ([`Error::Api`]) means
    /// the attempt is no longer held.
    pub async fn heartbeat(&self, token: &str, progress: Option<f64>) -> Result<HeartbeatAnswer> {
        let call = Call::new(Method::POST, self.attempt_url(token, "heartbeat"))
            .json(&HeartbeatRequest { progress })?;
        self.json(call).await
    }

    /// Reports an attempt's success with a JSON result.
    pub async fn complete(&self, token: &str, result: &Value) -> Result<ReportAnswer> {
        let call = Call::new(Method::POST, self.attempt_url(token, "complete")).json(result)?;
        self.json(call).await
    }

    /// Reports an attempt's success with a result of another media type
    /// its kind declares (`text/csv`), sent whole on each try.
    pub async fn complete_with(
        &self,
        token: &str,
        media_type: &str,
        body: Vec<u8>,
    ) -> Result<ReportAnswer> {
        let call = Call {
            body: Some(body),
            content_type: Some(media_type.to_owned()),
            ..Call::new(Method::POST, self.attempt_url(token, "complete"))
        };
        self.json(call).await
    }

    /// Reports that an attempt failed, retryably or for good.
    pub async fn fail(&self, token: &str, failure: &FailRequest) -> Result<ReportAnswer> {
        let call = Call::new(Method::POST, self.attempt_url(token, "fail")).json(failure)?;
        self.json(call).await
    }

    /// Reports that an attempt stopped at a cancel its heartbeat announced.
    pub async fn report_cancelled(&self, token: &str) -> Result<ReportAnswer> {
        self.json(Call::new(
            Method::POST,
            self.attempt_url(token, "cancelled"),
        ))
        .await
    }

    /// Reports how several attempts ended, in one call: each report is
    /// applied and answered as its own call would be, in the order sent.
    pub async fn report(&self, reports: Vec<AttemptReport>) -> Result<Vec<ReportOutcome>> {
        let call = Call::new(Method::POST, self.url(&["v1", "work", "reports"]))
            .json(&ReportsRequest { reports })?;
        let answer: ReportsAnswer = self.json(call).await?;
        Ok(answer.reports)
    }

    fn attempt_url(&self, token: &str, report: &str) -> Url {
        self.url(&["v1", "work", "attempts", token, report])
    }

    // ----- the machinery -----

    /// The base URL with these path segments, each percent-encoded (an id
    /// a user typed cannot reach another route).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.extend(segments);
        }
        url
    }

    /// The key of one intent: the caller's, or a fresh one that every try
    /// of this call sends.
    fn intent_key(&self) -> String {
        self.idempotency_key
            .clone()
            .unwrap_or_else(|| format!("rc-{}", uuid::Uuid::now_v7().simple()))
    }

    /// A change (a `POST` or `PUT`), under one key for all its tries.
    async fn change<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let mut call = Call::new(method, self.url(segments));
        if let Some(body) = body {
            call = call.json(body)?;
        }
        call.idempotency_key = Some(self.intent_key());
        self.json(call).await
    }

    async fn delete(&self, segments: &[&str]) -> Result<()> {
        let call = Call {
            gone_is_done: true,
            ..Call::new(Method::DELETE, self.url(segments))
        };
        self.answer(call).await.map(|_| ())
    }

    async fn page<T: DeserializeOwned>(
        &self,
        segments: Vec<String>,
        cursor: Option<String>,
    ) -> Result<Page<T>> {
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let mut url = self.url(&segments);
        if let Some(cursor) = cursor {
            url.query_pairs_mut().append_pair("cursor", &cursor);
        }
        self.json(Call::new(Method::GET, url)).await
    }

    async fn json<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        let answer = self.answer(call).await?;
        serde_json::from_slice(&answer.body).map_err(|e| {
            Error::Unexpected(format!(
                "{e}: {}",
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(500)])
            ))
        })
    }

    /// Sends `call` until it is answered with a 2xx, read whole, or it
    /// fails for good.
    async fn answer(&self, call: Call) -> Result<Answer> {
        let mut tries = Tries::new(self, &call);
        loop {
            let (remaining, number) = tries.begin();
            let outcome = self.try_answer(&call, remaining, number).await;
            if let ControlFlow::Break(answer) = tries.end(outcome).await {
                return answer;
            }
        }
    }

    /// One try of [`Client::answer`], the `number`th.
    async fn try_answer(&self, call: &Call, remaining: Duration, number: u32) -> Try<Answer> {
        let response = match self.request(call, remaining).send().await {
            Ok(response) => response,
            Err(e) => return Try::Again(Error::Transport(e), None),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        match response.bytes().await {
            Ok(body) => judge(
                call,
                number,
                Answer {
                    status,
                    body: body.to_vec(),
                },
                retry_after,
            ),
            // Cut while the answer was read: it may have been a
            // success, which the same key makes safe to ask again.
            Err(e) => Try::Again(Error::Transport(e), None),
        }
    }

    fn request(&self, call: &Call, remaining: Duration) -> reqwest::RequestBuilder {
        let timeout = (self.retry.try_timeout + call.longer_try)
            .min(remaining)
            .max(Duration::from_secs(1));
        let mut request = self
            .http
            .request(call.method.clone(), call.url.clone())
            .header(reqwest::header::AUTHORIZATION, self.authorization.clone())
            .timeout(timeout);
        if let Some(key) = &call.idempotency_key {
            request = request.header("idempotency-key", key);
        }
        if let Some(accept) = call.accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        if let Some(body) = &call.body {
            let content_type = call.content_type.as_deref().unwrap_or("application/json");
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body.clone());
        }
        request
    }
}

/// The one retry loop of the client, as its state: a call begins each try
/// with [`Tries::begin`] and hands what it came to to [`Tries::end`], which
/// ends the call or pauses along [`RetryPolicy`] before the next; past the
/// deadline or the last try allowed, the call ends with the last try's
/// error. Each try is reported to the `on_try` hook.
///
/// (A loop the caller writes, rather than one that takes the try as an
/// async closure: the futures of such closures are not known to be `Send`,
/// and a caller's task must be able to hold a call.)
struct Tries<'a> {
    client: &'a Client,
    call: &'a Call,
    started: Instant,
    /// The number of the try under way, from 1.
    number: u32,
    try_started: Instant,
}

impl<'a> Tries<'a> {
    fn new(client: &'a Client, call: &'a Call) -> Self {
        let now = Instant::now();
        Tries {
            client,
            call,
            started: now,
            number: 0,
            try_started: now,
        }
    }

    /// Starts the next try: the time left for it and its number.
    fn begin(&mut self) -> (Duration, u32) {
        self.number += 1;
        self.try_started = Instant::now();
        let remaining = self
            .client
            .retry
            .deadline
            .saturating_sub(self.started.elapsed());
        (remaining, self.number)
    }

    /// Ends the try: `Break` with the call's outcome, or `Continue` once
    /// the pause before the next try is over.
    async fn end<T>(&mut self, outcome: Try<T>) -> ControlFlow<Result<T>> {
        let took = self.try_started.elapsed();
        let (error, retry_after) = match outcome {
            Try::Done(value) => {
                self.report(took, None, None);
                return ControlFlow::Break(Ok(value));
            }
            Try::Fail(error) => {
                self.report(took, Some(&error), None);
                return ControlFlow::Break(Err(error));
            }
            Try::Again(error, retry_after) => (error, retry_after),
        };
        let policy = &self.client.retry;
        let backoff = shared::time::backoff_delay(
            i64::from(self.number),
            policy.first_backoff,
            policy.max_backoff,
        );
        let pause = backoff.max(retry_after.unwrap_or_default());
        if policy.last_try(self.number) || self.started.elapsed() + pause >= policy.deadline {
            self.report(took, Some(&error), None);
            return ControlFlow::Break(Err(error));
        }
        self.report(took, Some(&error), Some(pause));
        tokio::time::sleep(pause).await;
        ControlFlow::Continue(())
    }

    fn report(&self, took: Duration, error: Option<&Error>, next_try_in: Option<Duration>) {
        if let Some(OnTry(hook)) = &self.client.on_try {
            hook(&TryReport {
                method: &self.call.method,
                url: &self.call.url,
                number: self.number,
                took,
                error,
                next_try_in,
            });
        }
    }
}

impl Call {
    fn new(method: Method, url: Url) -> Self {
        Call {
            method,
            url,
            body: None,
            content_type: None,
            idempotency_key: None,
            accept: None,
            longer_try: Duration::ZERO,
            gone_is_done: false,
        }
    }

    fn json(mut self, body: &(impl Serialize + ?Sized)) -> Result<Self> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::Invalid(format!("the request body: {e}")))?;
        self.body = Some(body);
        Ok(self)
    }
}

/// Whether an answer is the call's, worth another try, or a refusal.
fn judge(call: &Call, tries: u32, answer: Answer, retry_after: Option<Duration>) -> Try<Answer> {
    let status = answer.status;
    if status.is_success() || (call.gone_is_done && tries > 1 && status == StatusCode::NOT_FOUND) {
        return Try::Done(answer);
    }
    refusal(status, &answer.body, retry_after)
}

/// A refusal's error, and whether it is worth another try.
fn refusal<T>(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> Try<T> {
    let problem = serde_json::from_slice::<Problem>(body).unwrap_or_else(|_| {
        error::problem_of_status(status.as_u16(), &String::from_utf8_lossy(body))
    });
    let error = Error::Api {
        problem: Box::new(problem),
        retry_after,
    };
    // A 409 with Retry-After is a key still in progress; one without is
    // about the resource's state, which the same request will not change.
    let again = status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || (status == StatusCode::CONFLICT && retry_after.is_some());
    if again {
        Try::Again(error, retry_after)
    } else {
        Try::Fail(error)
    }
}

/// `Retry-After` in whole seconds (the only form Receipt sends).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The items of every page, fetched one page at a time as the stream is
/// read, following `next_cursor` until it is `None`.
fn paged<'a, T, F, Fut>(fetch: F) -> impl Stream<Item = Result<T>> + 'a
where
    T: 'a,
    F: Fn(Option<String>) -> Fut + Clone + 'a,
    Fut: Future<Output = Result<Page<T>>> + 'a,
{
    // The state is the cursor of the next page to fetch; `None` once the
    // last page was fetched.
    stream::try_unfold(Some(None), move |next: Option<Option<String>>| {
        let fetch = fetch.clone();
        async move {
            let Some(cursor) = next else {
                return Ok::<_, Error>(None);
            };
            let page = fetch(cursor).await?;
            let next = page.next_cursor.map(Some);
            Ok(Some((
                stream::iter(page.data.into_iter().map(Ok::<T, Error>)),
                next,
            )))
        }
    })
    .try_flatten()
}
