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
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

/// What a ledger import did: entries stored, and entries skipped because
/// an entry of the same id and content was already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub struct ImportOutcome {
    pub inserted: u64,
    pub skipped: u64,
}

/// A webhook. `secret` (`whsec_...`) is only in the answer to its
/// registration and to a rotation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
    /// `false` after a receiver answered 410.
    pub enabled: bool,
    #[serde(default)]
    pub secret: Option<String>,
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
    pub event_id: String,
    pub event_type: String,
    /// 1 for the event's first attempt.
    pub attempt: i64,
    pub response_status: Option<i64>,
    /// Why there was no status (a timeout, a refused connection).
    pub error: Option<String>,
    pub duration_ms: i64,
    pub attempted_at: String,
    /// When the event is tried again; `None` when no attempt follows.
    pub next_attempt_at: Option<String>,
}

/// The tenant's filing endpoint, where `period-close` files returns.
/// `secret` only in the answer to a `PUT`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct FilingEndpoint {
    pub url: String,
    #[serde(default)]
    pub secret: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A month of the ledger: `open`, `locked` (a `period-close` runs) or
/// `closed`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Period {
    pub month: String,
    pub state: String,
    pub job_id: Option<String>,
    pub locked_at: Option<String>,
    pub closed_at: Option<String>,
    pub filing_reference: Option<String>,
}

/// A recurring schedule: a report submitted on a cron timetable read in
/// a time zone.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Schedule {
    pub schedule_id: String,
    pub kind: String,
    /// The params template, `{"$fire": "..."}` values included.
    pub params: Value,
    pub cron: String,
    pub timezone: String,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    /// `run_once` or `skip`.
    pub misfire: String,
    pub priority: Priority,
    pub paused: bool,
    /// The next fires (up to five), UTC.
    pub next_fires: Vec<String>,
    pub last_fire_at: Option<String>,
    pub created_at: String,
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
    pub kind: String,
    pub params: Value,
    pub cron: String,
    pub timezone: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    /// `run_once` (the default) or `skip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

impl NewSchedule {
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
