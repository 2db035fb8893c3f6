//! The parameters of Receipt's built-in report kinds, typed, and what a
//! submit sends: a kind, its parameters, and when and how urgently to run.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::Priority;

pub use shared::report_params::{
    GstSummaryParams as GstSummary, LedgerExportParams as LedgerExport, SleepParams as Sleep,
};

/// The parameters of one report kind: what `POST /v1/reports/{kind}`
/// takes as its body. Implemented by the built-in kinds' parameters, the
/// very types the service decodes (`shared::report_params`); any other
/// kind is submitted with [`Submit::json`].
pub trait Report: Serialize {
    /// The kind's name in the URL, such as `gst-summary`.
    const KIND: &'static str;
}

/// `gst-summary`: a month's GST, outward and inward, per rate and in
/// total, and the net payable.
impl Report for GstSummary {
    const KIND: &'static str = "gst-summary";
}

/// `ledger-export`: every ledger entry from `from` to `to` (both
/// inclusive, `YYYY-MM-DD`), with its taxes; JSON or CSV.
impl Report for LedgerExport {
    const KIND: &'static str = "ledger-export";
}

/// `period-close`: locks a month, computes its summary, files it with the
/// tenant's filing endpoint and records the month closed (a saga: steps
/// done are undone if a later one fails). Its parameters are those of
/// `gst-summary`: the month to close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct PeriodClose(pub GstSummary);

impl Report for PeriodClose {
    const KIND: &'static str = "period-close";
}

/// `sleep`, a diagnostic kind (served only with
/// `ENABLE_DIAGNOSTIC_KINDS=true`): sleeps `ms`, then fails its first
/// `fail_times` attempts, retryably or, with `permanent`, for good.
impl Report for Sleep {
    const KIND: &'static str = "sleep";
}

/// A submit: the kind and its parameters, and optionally when to run it,
/// its priority and the idempotency key that stands for this intent.
///
/// ```
/// use receipt_client::{GstSummary, Priority, Submit};
/// use std::time::Duration;
///
/// let monthly = Submit::new(GstSummary { month: "2026-10".into() })
///     .priority(Priority::High)
///     .delay(Duration::from_secs(3600))
///     .idempotency_key("gst-2026-10");
/// let custom = Submit::json("vat-summary", serde_json::json!({"quarter": "2026-Q4"}));
/// # let _ = (monthly, custom);
/// ```
#[derive(Debug, Clone)]
pub struct Submit {
    pub(crate) kind: String,
    pub(crate) params: Value,
    pub(crate) run_at: Option<String>,
    pub(crate) delay: Option<u64>,
    pub(crate) priority: Option<Priority>,
    pub(crate) idempotency_key: Option<String>,
}

impl Submit {
    /// A built-in kind, from its typed parameters.
    pub fn new<R: Report>(report: R) -> Self {
        // A struct of strings, numbers and booleans always serializes.
        let params = serde_json::to_value(&report).unwrap_or(Value::Null);
        Self::json(R::KIND, params)
    }

    /// Any kind, with its parameters as JSON.
    pub fn json(kind: impl Into<String>, params: Value) -> Self {
        Submit {
            kind: kind.into(),
            params,
            run_at: None,
            delay: None,
            priority: None,
            idempotency_key: None,
        }
    }

    /// Start at this RFC 3339 time (`run_at`), such as
    /// `2026-12-03T06:00:00Z`.
    pub fn run_at(mut self, time: impl Into<String>) -> Self {
        self.run_at = Some(time.into());
        self.delay = None;
        self
    }

    /// Start this long from now (`delay`, whole seconds).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay.as_secs());
        self.run_at = None;
        self
    }

    /// `high`, `normal` (the default) or `low` among the tenant's jobs.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The key this intent is known by, instead of one the client makes.
    /// Give one that outlives the process (an order number, `gst-2026-10`)
    /// when a restarted program may submit the same intent again.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The kind this submit names.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut query = Vec::new();
        if let Some(run_at) = &self.run_at {
            query.push(("run_at", run_at.clone()));
        }
        if let Some(delay) = self.delay {
            query.push(("delay", delay.to_string()));
        }
        if let Some(priority) = self.priority {
            query.push(("priority", priority.as_str().to_owned()));
        }
        query
    }
}

impl<R: Report> From<R> for Submit {
    fn from(report: R) -> Self {
        Submit::new(report)
    }
}
