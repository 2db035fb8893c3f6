//! The objects Receipt answers with, besides the job object (which is the
//! service's own type, [`crate::Job`]). Unknown members are ignored, so a
//! client keeps working when the contract grows.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Priority;

/// One page of a list: up to 200 items, newest first, and the cursor of
/// the next page (`None` on the last).
#[derive(Debug, Clone, Deserialize)]
pub struct Page<T> {
    /// The items of this page.
    pub data: Vec<T>,
    /// The cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// What a ledger import did: entries stored, and entries skipped because
/// an entry of the same id and content was already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub struct ImportOutcome {
    /// Entries stored.
    pub inserted: u64,
    /// Entries already stored with the same content.
    pub skipped: u64,
}

/// A webhook. `secret` (`whsec_...`) is only in the answer to its
/// registration and to a rotation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Webhook {
    /// `wh_...`.
    pub id: String,
    /// Where events are sent.
    pub url: String,
    /// The events sent: `job.succeeded`, `job.failed`, `job.cancelled`.
    pub events: Vec<String>,
    /// The one job whose events are sent; `None` for every job.
    pub job_id: Option<String>,
    /// `false` after a receiver answered 410.
    pub enabled: bool,
    /// `whsec_...`: in the answer to a registration or a rotation only.
    #[serde(default)]
    pub secret: Option<String>,
    /// When it was registered (RFC 3339).
    pub created_at: String,
}

/// What [`crate::Client::register_webhook`] sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NewWebhook {
    /// `http` or `https`, on a public address unless the service allows
    /// private ones.
    pub url: String,
    /// `job.succeeded`, `job.failed`, `job.cancelled`; all when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// Only this job's events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

impl NewWebhook {
    /// Every event of every job, sent to `url`.
    pub fn to(url: impl Into<String>) -> Self {
        NewWebhook {
            url: url.into(),
            ..Default::default()
        }
    }
}

/// One delivery attempt of a webhook's event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Delivery {
    /// `evt_...`, the `webhook-id` of the event.
    pub event_id: String,
    /// `job.succeeded`, `job.failed` or `job.cancelled`.
    pub event_type: String,
    /// 1 for the event's first attempt.
    pub attempt: i64,
    /// The receiver's status, when it answered.
    pub response_status: Option<i64>,
    /// Why there was no status (a timeout, a refused connection).
    pub error: Option<String>,
    /// How long the attempt took.
    pub duration_ms: i64,
    /// When the attempt was made.
    pub attempted_at: String,
    /// When the event is tried again; `None` when no attempt follows.
    pub next_attempt_at: Option<String>,
}

/// The tenant's filing endpoint, where `period-close` files returns.
/// `secret` only in the answer to a `PUT`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct FilingEndpoint {
    /// Where filings and withdrawals are posted.
    pub url: String,
    /// `whsec_...`, which signs them: in the answer to a `PUT` only.
    #[serde(default)]
    pub secret: Option<String>,
    /// When it was first set.
    pub created_at: String,
    /// When its URL last changed.
    pub updated_at: String,
}

/// A month of the ledger: `open`, `locked` (a `period-close` runs) or
/// `closed`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Period {
    /// `YYYY-MM`.
    pub month: String,
    /// `open`, `locked` or `closed`.
    pub state: String,
    /// The `period-close` job that locked (and closed) it.
    pub job_id: Option<String>,
    /// When it was locked.
    pub locked_at: Option<String>,
    /// When it was closed.
    pub closed_at: Option<String>,
    /// The filing endpoint's reference for the filing, when it gave one.
    pub filing_reference: Option<String>,
}

/// A recurring schedule: a report submitted on a cron timetable read in
/// a time zone.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Schedule {
    /// `sch_...`.
    pub schedule_id: String,
    /// The report kind each fire submits.
    pub kind: String,
    /// The params template, `{"$fire": "..."}` values included.
    pub params: Value,
    /// Five fields: minute, hour, day of month, month, day of week.
    pub cron: String,
    /// The IANA zone the cron expression is read in.
    pub timezone: String,
    /// No fire before it.
    pub starts_at: Option<String>,
    /// No fire after it.
    pub ends_at: Option<String>,
    /// `run_once` or `skip`.
    pub misfire: String,
    /// The priority of the jobs it makes.
    pub priority: Priority,
    /// `true` while paused: no fire makes a job.
    pub paused: bool,
    /// The next fires (up to five), UTC.
    pub next_fires: Vec<String>,
    /// The fire of the latest job it made.
    pub last_fire_at: Option<String>,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

/// What [`crate::Client::create_schedule`] sends.
///
/// ```
/// use receipt_client::NewSchedule;
/// use serde_json::json;
///
/// // The previous month's GST summary, on the 1st at 06:00 India time.
/// let monthly = NewSchedule::new(
///     "gst-summary",
///     json!({"month": {"$fire": "previous_month"}}),
///     "0 6 1 * *",
///     "Asia/Kolkata",
/// );
/// # let _ = monthly;
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewSchedule {
    /// The report kind each fire submits.
    pub kind: String,
    /// The kind's parameters; any value may be `{"$fire": "<name>"}` (`date`, `previous_date`, `month`, `previous_month`, `time`), filled from the fire's time.
    pub params: Value,
    /// Five fields: minute, hour, day of month, month, day of week.
    pub cron: String,
    /// An IANA zone name (`Asia/Kolkata`, `UTC`).
    pub timezone: String,
    /// RFC 3339: no fire before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<String>,
    /// RFC 3339: no fire after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    /// `run_once` (the default) or `skip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    /// The priority of the jobs it makes (`normal` when `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

impl NewSchedule {
    /// A schedule of `kind` with these params, on `cron` in `timezone`,
    /// with no start or end, `run_once` for missed fires and `normal`
    /// priority.
    pub fn new(
        kind: impl Into<String>,
        params: Value,
        cron: impl Into<String>,
        timezone: impl Into<String>,
    ) -> Self {
        NewSchedule {
            kind: kind.into(),
            params,
            cron: cron.into(),
            timezone: timezone.into(),
            starts_at: None,
            ends_at: None,
            misfire: None,
            priority: None,
        }
    }
}
