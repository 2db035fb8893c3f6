//! What the client sends besides a submit, and the pages of a list. The
//! objects Receipt answers with are the service's own types (re-exported
//! at the crate's root); unknown members are ignored, so a client keeps
//! working when the contract grows.

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
