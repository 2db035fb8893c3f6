//! The objects of registered kinds and of the worker protocol
//! (`docs/api.md`, Registered kinds and Workers over HTTP): one definition
//! that the service serializes and its clients (the Rust client, its
//! worker) deserialize.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{JobStatus, Priority};

/// A report kind as `/v1/kinds` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KindObject {
    pub name: String,
    /// Built into Receipt (run by its own workers), or registered by the
    /// tenant (run by the tenant's workers over HTTP).
    pub builtin: bool,
    pub about: String,
    /// A registered kind's JSON Schema of a submit's body; a built-in
    /// kind's is in the OpenAPI document.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub params_schema: Option<Value>,
    pub timeout_secs: u64,
    pub max_attempts: i64,
    /// The media types a registered kind's result may have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_media_types: Option<Vec<String>>,
    /// How many of the tenant's jobs of a registered kind may run at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_running: Option<i64>,
    /// The priority of a submit that names none.
    pub priority: Priority,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// The kinds a tenant may submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KindList {
    pub kinds: Vec<KindObject>,
}

/// The answer to a `DELETE` of a registered kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeletedKind {
    pub name: String,
    /// The kind's jobs still queued or running: workers that name the
    /// kind keep leasing them.
    pub active_jobs: i64,
}

/// A lease of due attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The worker's name, as the dashboard and the jobs it holds show it:
    /// 1 to 64 letters, digits, `.`, `_`, `-`, `:` or `@`.
    #[cfg_attr(feature = "openapi", schema(example = "reports-1"))]
    pub worker: String,
    /// The registered kinds the worker runs (1 to 32).
    pub kinds: Vec<String>,
    /// Attempts to take at most: 1 (the default) to 100.
    #[serde(default)]
    pub max: Option<u32>,
    /// Seconds to wait for a due attempt when none is due: 0 (the
    /// default) to 30.
    #[serde(default)]
    pub wait_secs: Option<u64>,
}

/// An attempt a lease took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeasedAttemptObject {
    /// Names this attempt in every report on it; opaque.
    pub token: String,
    pub job_id: String,
    pub kind: String,
    /// Which attempt this is (1 for the first); attempts handed back at an
    /// outage of Receipt's own database are not counted.
    pub attempt: i64,
    pub max_attempts: i64,
    /// The job's parameters, as submitted (checked against the kind's
    /// schema).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: Value,
    pub priority: Priority,
    /// When the lease lapses unless a heartbeat extends it (RFC 3339).
    pub lease_expires_at: String,
    /// When the attempt must have ended, its kind's timeout from the lease
    /// (RFC 3339): no heartbeat extends the lease past it.
    pub deadline: String,
    /// The W3C trace context of the submit that made the job, if traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseAnswer {
    /// Empty when none was due within the wait.
    pub attempts: Vec<LeasedAttemptObject>,
}

/// A heartbeat's body (optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// How far the attempt is, from 0 to 1.
    #[serde(default)]
    pub progress: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatAnswer {
    /// A client asked for the job's cancel: stop, and report it with
    /// `POST /v1/work/attempts/{token}/cancelled`.
    pub cancel_requested: bool,
    pub lease_expires_at: String,
    pub deadline: String,
}

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FailRequest {
    /// Worth another attempt (after a backoff, while attempts are left),
    /// or failed for good.
    pub retryable: bool,
    /// A short name of the error (1 to 64 letters, digits, `.`, `_` or
    /// `-`; default `error`), which the job's `error.type` shows.
    #[serde(default)]
    pub error_type: Option<String>,
    /// What went wrong, at most 4096 characters.
    pub message: String,
    /// More about it, as a JSON object of at most 16 KiB, which the
    /// job's `error.details` shows once it has FAILED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub details: Option<Value>,
}

/// What a report on an attempt did to its job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportAnswer {
    pub job_id: String,
    /// The job's status after the report: `SUCCEEDED`, `QUEUED` (a retry),
    /// `FAILED` or `CANCELLED`.
    pub status: JobStatus,
    /// When a retry is due (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
}

/// Reports on several attempts in one call: each is applied and answered
/// as its own complete, fail or cancelled call would be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReportsRequest {
    /// 1 to 100 reports, each on another attempt.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<AttemptReportDocument>))]
    pub reports: Vec<AttemptReport>,
}

/// How one attempt ended, named by its token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase", deny_unknown_fields)]
pub enum AttemptReport {
    /// The attempt succeeded with this JSON result (as
    /// `POST /v1/work/attempts/{token}/complete` with `application/json`).
    Complete {
        token: String,
        result: Value,
        /// The trace context of the attempt's span, when the worker
        /// traces it: the job's webhook deliveries join its trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The attempt failed (as `POST /v1/work/attempts/{token}/fail`).
    Fail {
        token: String,
        retryable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
        /// The trace context of the attempt's span, when the worker
        /// traces it: the job's webhook deliveries join its trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The attempt stopped at a cancel its heartbeat announced (as
    /// `POST /v1/work/attempts/{token}/cancelled`).
    Cancelled {
        token: String,
        /// The trace context of the attempt's span, when the worker
        /// traces it: the job's webhook deliveries join its trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
}

/// [`AttemptReport`] as the OpenAPI document describes it: one object,
/// whose members besides `outcome` and `token` are those of the outcome's
/// own call (a tagged union of objects is more than some client
/// generators take).
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[schema(as = AttemptReport)]
#[allow(dead_code)]
pub struct AttemptReportDocument {
    outcome: ReportOutcomeName,
    /// The attempt's token, from its lease.
    token: String,
    /// `complete`: the result, a JSON value.
    #[schema(value_type = Option<Object>)]
    result: Option<Value>,
    /// `fail`: worth another attempt, or failed for good.
    retryable: Option<bool>,
    /// `fail`: as a fail's.
    error_type: Option<String>,
    /// `fail`: as a fail's.
    message: Option<String>,
    /// `fail`: as a fail's.
    #[schema(value_type = Option<Object>)]
    details: Option<Value>,
    /// The trace context of the attempt's span, when the worker traces
    /// it: the job's webhook deliveries join its trace.
    traceparent: Option<String>,
}

/// What a report says of its attempt: the call it stands for.
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ReportOutcomeName {
    Complete,
    Fail,
    Cancelled,
}

impl AttemptReport {
    pub fn token(&self) -> &str {
        match self {
            AttemptReport::Complete { token, .. }
            | AttemptReport::Fail { token, .. }
            | AttemptReport::Cancelled { token, .. } => token,
        }
    }
}

/// The answers to a [`ReportsRequest`], in its order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportsAnswer {
    pub reports: Vec<ReportOutcome>,
}

/// What one report's own call would have answered: its status, and its
/// body (a [`ReportAnswer`] for a 200, a problem document otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportOutcome {
    pub token: String,
    pub status: u16,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub body: Value,
}

/// A worker over HTTP, as `GET /v1/workers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerObject {
    /// The name it leases under.
    pub name: String,
    /// The kinds its last lease named.
    pub kinds: Vec<String>,
    /// It leased within the last minute, or holds an attempt now.
    pub connected: bool,
    /// Attempts it holds now.
    pub holding: i64,
    /// Attempts it leased, in all.
    pub leased: i64,
    /// Attempts it reported failed, in all.
    pub failed: i64,
    pub first_seen_at: String,
    /// Its last lease.
    pub last_seen_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerList {
    pub workers: Vec<WorkerObject>,
}

/// A kind as its tenant declares it: the body of `PUT /v1/kinds/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KindDeclaration {
    /// What the kind does, in a sentence or two.
    #[serde(default)]
    pub about: Option<String>,
    /// A JSON Schema (2020-12) of a submit's body. It may not refer to
    /// documents outside itself.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params_schema: Value,
    /// Whole seconds one attempt may run, from its lease: 1 to 86400.
    pub timeout_secs: u64,
    /// Attempts before a retryable failure becomes final: 1 to 100
    /// (default 5).
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// The media types a result may have (default `["application/json"]`).
    #[serde(default)]
    pub result_media_types: Option<Vec<String>>,
    /// How many of the tenant's jobs of the kind may run at once (none
    /// when absent).
    #[serde(default)]
    pub max_running: Option<i64>,
    /// The priority of a submit that names none (default `normal`).
    #[serde(default)]
    pub priority: Option<Priority>,
}
