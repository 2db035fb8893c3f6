//! The job, its state machine, and the shape clients see.

use serde::{Deserialize, Serialize};

use crate::time::to_rfc3339;

/// Where a job is in its life. Written once here; the README and
/// `docs/design.md` draw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Accepted and durable; waiting in the outbox or the queue, possibly for
    /// a retry's backoff (`run_after`). The relay publishes it; a worker's
    /// claim moves it to `Running`; a cancel moves it to `Cancelled`.
    Queued,
    /// An attempt holds a lease. Its worker finishes it (`Succeeded`,
    /// `Failed`, `Cancelled`, or back to `Queued` for a retry); if the lease
    /// lapses the sweeper puts it back to `Queued` as a new attempt. A
    /// saga's compensating phase is `Running` too (`docs/sagas.md`).
    Running,
    /// Final: the result is stored.
    Succeeded,
    /// Final: a permanent error, or the last attempt's error.
    Failed,
    /// Final: cancelled while queued, or stopped at a checkpoint after a cancel.
    Cancelled,
}

impl JobStatus {
    pub const ALL: [JobStatus; 5] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "QUEUED",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
            JobStatus::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// Where a webhook event is in its delivery (`webhook_events.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    /// Waiting for its next attempt (`next_attempt_at`).
    Pending,
    /// Final: an attempt got a 2xx.
    Delivered,
    /// Final: attempts used up, or its webhook is gone or disabled.
    Failed,
}

impl EventState {
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Pending => "pending",
            EventState::Delivered => "delivered",
            EventState::Failed => "failed",
        }
    }
}

/// The webhook event types, one per final status.
pub const EVENT_TYPES: [&str; 3] = ["job.succeeded", "job.failed", "job.cancelled"];

/// The event a final status announces.
pub fn event_type_of(status: JobStatus) -> Option<&'static str> {
    match status {
        JobStatus::Succeeded => Some("job.succeeded"),
        JobStatus::Failed => Some("job.failed"),
        JobStatus::Cancelled => Some("job.cancelled"),
        JobStatus::Queued | JobStatus::Running => None,
    }
}

/// How a job ranks among its tenant's due jobs (`docs/api.md`,
/// Priorities): higher first, with aging, so that a job waits behind a
/// stream of higher ones for `PRIORITY_AGING` per step at most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// The time (unix ms) a job of this priority that is due at `due_at`
    /// ranks at: its due time plus `aging` for each step below `high`. Due
    /// jobs of a tenant run in rank order, so a job runs before any job of
    /// higher priority that became due more than its offset after it.
    pub fn rank_at(self, due_at: i64, aging: std::time::Duration) -> i64 {
        let steps = match self {
            Priority::High => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        };
        due_at.saturating_add(steps * crate::time::duration_ms(aging))
    }
}

/// The concurrency cap a QUEUED job was parked at (`capped`): it waits,
/// out of the queue, until a job of its tenant (or, for `Kind`, of its
/// tenant and kind) stops running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `MAX_RUNNING_PER_TENANT`.
    Tenant,
    /// `MAX_RUNNING_PER_KIND`.
    Kind,
}

impl Cap {
    pub fn as_str(self) -> &'static str {
        match self {
            Cap::Tenant => "tenant",
            Cap::Kind => "kind",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Cap::Tenant, Cap::Kind]
            .into_iter()
            .find(|c| c.as_str() == text)
    }
}

/// A job as stored.
#[derive(Debug, Clone)]
pub struct Job {
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub params: String,
    pub status: JobStatus,
    pub attempts: i64,
    pub max_attempts: i64,
    pub progress: Option<f64>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub run_after: i64,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    pub cancel_requested: bool,
    /// The job this one retries (`POST /v1/jobs/{id}/retry`).
    pub retry_of: Option<String>,
    /// The schedule whose fire made this job.
    pub schedule_id: Option<String>,
    pub priority: Priority,
    /// The cap it is parked at, while QUEUED.
    pub capped: Option<Cap>,
    /// Who holds its running attempt: a worker over HTTP as `http:{name}`,
    /// a built-in worker by its id.
    pub worker_id: Option<String>,
    /// The last failure's details (JSON), from a worker over HTTP.
    pub error_details: Option<String>,
}

/// The job object of `docs/api.md`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobObject {
    /// `job_` + a time-ordered UUID (v7).
    #[cfg_attr(
        feature = "openapi",
        schema(example = "job_019ad5a1c2e37b40a0c2f1d3e4b5a697")
    )]
    pub job_id: String,
    #[cfg_attr(feature = "openapi", schema(example = "gst-summary"))]
    pub kind: String,
    /// The parameters as submitted.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: serde_json::Value,
    pub status: JobStatus,
    /// Attempts started so far.
    pub attempts: i64,
    /// 0.0 to 1.0, or null while unknown.
    pub progress: Option<f64>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// `/v1/jobs/{job_id}/result` once `SUCCEEDED`.
    pub result_url: Option<String>,
    /// Set once `FAILED`.
    pub error: Option<JobErrorObject>,
    /// True after a cancel of a running job (or of one waiting for its
    /// next attempt with work to undo, a saga), until it stops.
    pub cancel_requested: bool,
    /// When the next attempt is due, while a job that was already attempted
    /// waits as QUEUED (a retry's backoff, or a new attempt after its worker
    /// stopped); null otherwise.
    pub next_attempt_at: Option<String>,
    /// The FAILED or CANCELLED job this one retries (`POST
    /// /v1/jobs/{job_id}/retry` made it with the same kind and parameters);
    /// null for a job that was submitted.
    pub retry_of: Option<String>,
    /// The schedule whose fire made this job (`/v1/schedules`); null for
    /// a job that was submitted or retried.
    pub schedule_id: Option<String>,
    /// `high`, `normal` or `low`: how it ranks among its tenant's due jobs.
    pub priority: Priority,
    /// Why a QUEUED job is not running yet; null unless QUEUED.
    pub waiting: Option<WaitingObject>,
    /// Sagas only (`GET /v1/jobs/{job_id}` and a cancel's answer; absent
    /// for other kinds and in lists): `forward` while the steps run,
    /// `compensating` while the steps done are undone, `completed` or
    /// `compensated` once nothing is left to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(nullable = false, example = "compensating")
    )]
    pub phase: Option<String>,
    /// Sagas only, where `phase` is: every step in order, with its
    /// compensation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub steps: Option<Vec<StepObject>>,
    /// While RUNNING, the worker that holds the attempt: the name a worker
    /// over HTTP leased it under, or a built-in worker's id; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false, example = "reports-1"))]
    pub worker: Option<String>,
}

/// Why a queued job waits (`docs/api.md`, The job object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Submitted to run later (`run_at` or `delay`): it runs at `until`.
    Scheduled,
    /// A retryable failure's backoff: the next attempt is due at `until`.
    RetryBackoff,
    /// Due, and waiting for a free worker slot.
    Queued,
    /// Due, and parked: its tenant runs `MAX_RUNNING_PER_TENANT` jobs
    /// (`running` of `limit`). It is woken when one of them ends.
    TenantConcurrencyLimit,
    /// Due, and parked: its tenant runs its kind's cap of
    /// `MAX_RUNNING_PER_KIND` (`running` of `limit`).
    KindConcurrencyLimit,
}

/// The `waiting` member of the job object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingObject {
    pub reason: WaitReason,
    /// When the wait ends, for `scheduled` and `retry_backoff`; null for
    /// the others.
    pub until: Option<String>,
    /// For a concurrency limit: how many of the tenant's jobs (of the
    /// job's kind, for `kind_concurrency_limit`) are RUNNING now, where
    /// the answer reads them (`GET /v1/jobs/{job_id}`); null otherwise.
    pub running: Option<i64>,
    /// For a concurrency limit: the cap.
    pub limit: Option<i64>,
}

/// A step as the job object shows it (`docs/api.md`, Sagas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepObject {
    /// The step's name, in the order the steps run.
    #[cfg_attr(feature = "openapi", schema(example = "file"))]
    pub name: String,
    /// `pending` (not started), `running`, `done` or `failed`.
    pub outcome: String,
    /// Tries of the action so far.
    pub attempts: i64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The last try's error: the failure once `failed`, the error being
    /// retried while `running`.
    pub error: Option<JobErrorObject>,
    /// What the step produced, once `done`.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub output: Option<serde_json::Value>,
    /// Its compensation, once one is needed; null otherwise.
    pub compensation: Option<CompensationObject>,
}

/// A step's compensation as the job object shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompensationObject {
    /// `pending`, `running` (being tried, or waiting to be tried again
    /// after an error) or `done`.
    pub outcome: String,
    /// Tries so far; a compensation is tried until it succeeds.
    pub attempts: i64,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The last failed try's error, until it succeeds.
    pub error: Option<JobErrorObject>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobErrorObject {
    #[serde(rename = "type")]
    pub error_type: String,
    pub message: String,
    /// What a worker over HTTP reported beside the message (a JSON
    /// object); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>, nullable = false))]
    pub details: Option<serde_json::Value>,
}

impl Job {
    /// Why this job waits at `now`, and until when (unix ms): `None`
    /// unless it is QUEUED. Read from the row alone, so a poll costs no
    /// look at the rest of the queue.
    pub fn waiting_at(&self, now: i64) -> Option<(WaitReason, Option<i64>)> {
        if self.status != JobStatus::Queued {
            return None;
        }
        if self.run_after > now {
            // Submitted with a later start, or waiting out a backoff: a job
            // that never started can only wait for its start.
            let reason = if self.started_at.is_none() {
                WaitReason::Scheduled
            } else {
                WaitReason::RetryBackoff
            };
            return Some((reason, Some(self.run_after)));
        }
        let reason = match self.capped {
            Some(Cap::Tenant) => WaitReason::TenantConcurrencyLimit,
            Some(Cap::Kind) => WaitReason::KindConcurrencyLimit,
            None => WaitReason::Queued,
        };
        Some((reason, None))
    }

    pub fn to_object(&self) -> JobObject {
        self.to_object_at(crate::time::now_ms())
    }

    /// The job object as of `now` (which decides `waiting`).
    pub fn to_object_at(&self, now: i64) -> JobObject {
        let params = serde_json::from_str(&self.params).unwrap_or(serde_json::Value::Null);
        let error = match (self.status, &self.error_type, &self.error_message) {
            (JobStatus::Failed, Some(t), Some(m)) => Some(JobErrorObject {
                error_type: t.clone(),
                message: m.clone(),
                details: self
                    .error_details
                    .as_deref()
                    .and_then(|d| serde_json::from_str(d).ok()),
            }),
            _ => None,
        };
        let retry_pending = self.status == JobStatus::Queued && self.attempts > 0;
        JobObject {
            job_id: self.job_id.clone(),
            kind: self.kind.clone(),
            params,
            status: self.status,
            attempts: self.attempts,
            progress: self.progress,
            created_at: to_rfc3339(self.created_at),
            started_at: self.started_at.map(to_rfc3339),
            finished_at: self.finished_at.map(to_rfc3339),
            result_url: (self.status == JobStatus::Succeeded)
                .then(|| format!("/v1/jobs/{}/result", self.job_id)),
            error,
            cancel_requested: self.cancel_requested && !self.status.is_final(),
            next_attempt_at: retry_pending.then(|| to_rfc3339(self.run_after)),
            retry_of: self.retry_of.clone(),
            schedule_id: self.schedule_id.clone(),
            priority: self.priority,
            waiting: self.waiting_at(now).map(|(reason, until)| WaitingObject {
                reason,
                until: until.map(to_rfc3339),
                running: None,
                limit: None,
            }),
            phase: None,
            steps: None,
            worker: (self.status == JobStatus::Running)
                .then(|| self.worker_name())
                .flatten(),
        }
    }

    /// The name of the worker holding the job, as the job object shows it.
    pub fn worker_name(&self) -> Option<String> {
        self.worker_id
            .as_deref()
            .map(|id| id.strip_prefix("http:").unwrap_or(id).to_owned())
    }
}

/// How an attempt ended, as the worker reports it to the store.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// The whole result, one JSON document.
    Succeeded {
        result: String,
    },
    /// The result is the `chunks` chunks this attempt wrote while it ran
    /// (`job_result_chunks`).
    SucceededInChunks {
        chunks: i64,
    },
    Failed {
        error: JobErrorObject,
    },
    RetryAt {
        at: i64,
        error: JobErrorObject,
    },
    /// The attempt met an outage of Receipt's own database: it runs again
    /// at `at`, and the attempt is not counted against the job's limit
    /// (the job did not fail; its database was away).
    HandBack {
        at: i64,
        error: JobErrorObject,
    },
    Cancelled,
}

/// What the success write of an attempt stores in `job_results`. It stays
/// small either way: a big result is written in chunks while the attempt
/// runs, and only their count is stored here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultBody {
    /// The whole result, one JSON document.
    Document(String),
    /// The attempt's chunks `0..count` are the result.
    Chunks(i64),
}

impl From<String> for ResultBody {
    fn from(document: String) -> Self {
        ResultBody::Document(document)
    }
}

impl From<&str> for ResultBody {
    fn from(document: &str) -> Self {
        ResultBody::Document(document.to_owned())
    }
}
