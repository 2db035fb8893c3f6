//! The objects the API answers with besides the job object
//! ([`crate::model::JobObject`]): one definition that the service
//! serializes and its clients deserialize, so the two cannot drift apart.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ledger::FieldError, model::Priority};

/// A webhook; `secret` only in the answer to its registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookObject {
    #[cfg_attr(
        feature = "openapi",
        schema(example = "wh_019ad5a1c2e37b40a0c2f1d3e4b5a697")
    )]
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
    /// False after a receiver answered 410.
    pub enabled: bool,
    /// `whsec_` + base64: the HMAC key is the base64 part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: String,
}

/// One delivery attempt of a webhook's event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryObject {
    pub event_id: String,
    pub event_type: String,
    /// 1 for the first attempt of this event.
    pub attempt: i64,
    pub response_status: Option<i64>,
    pub error: Option<String>,
    /// How long the attempt took, in milliseconds.
    pub duration_ms: i64,
    pub attempted_at: String,
    /// When the next attempt is due; null when none will follow.
    pub next_attempt_at: Option<String>,
}

/// The tenant's filing endpoint; `secret` only in the answer to a `PUT`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FilingEndpointObject {
    pub url: String,
    /// `whsec_` + base64: filings and withdrawals are signed with it as
    /// webhooks are. Made at the first `PUT` and kept when the URL changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A month of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeriodObject {
    #[cfg_attr(feature = "openapi", schema(example = "2026-10"))]
    pub month: String,
    /// `open`, `locked` (a period-close job is running: imports dated in
    /// the month are refused) or `closed` (refused until it is reopened).
    #[cfg_attr(feature = "openapi", schema(example = "closed"))]
    pub state: String,
    /// The period-close job that locked (and closed) it; null when open.
    pub job_id: Option<String>,
    pub locked_at: Option<String>,
    pub closed_at: Option<String>,
    /// The filing endpoint's reference for the filing, when it gave one.
    pub filing_reference: Option<String>,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleObject {
    #[cfg_attr(
        feature = "openapi",
        schema(example = "sch_019ad5a1c2e37b40a0c2f1d3e4b5a697")
    )]
    pub schedule_id: String,
    pub kind: String,
    /// The template, as given.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: Value,
    pub cron: String,
    pub timezone: String,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    /// `run_once` or `skip`.
    pub misfire: String,
    /// The priority of the jobs it makes.
    pub priority: Priority,
    pub paused: bool,
    /// The next fires (up to five), null-free; empty once none is left or
    /// while paused.
    pub next_fires: Vec<String>,
    /// The fire that made the latest job.
    pub last_fire_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// What a ledger import did: entries stored, and entries skipped because
/// one of the same id and content was stored already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImportResponse {
    pub inserted: usize,
    pub skipped: usize,
}

/// An error answer (RFC 9457), sent as `application/problem+json`: every
/// error the service returns is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// Names the problem: `/problems/{slug}` (`docs/api.md`, Errors).
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", schema(example = "/problems/not-found"))]
    pub problem_type: String,
    /// The status's reason phrase.
    #[cfg_attr(feature = "openapi", schema(example = "Not Found"))]
    pub title: String,
    /// The HTTP status.
    #[cfg_attr(feature = "openapi", schema(example = 404))]
    pub status: u16,
    /// What was wrong with this request, in words.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "there is no job job_019ad5a1c2e37b40a0c2f1d3e4b5a697")
    )]
    pub detail: String,
    /// 422 only: one entry per invalid field.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub errors: Option<Vec<FieldError>>,
    /// A ledger import's 409 only: the ids stored with different content.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub ids: Option<Vec<String>>,
    /// A 403 for a key without the scope a route needs (`read`, `submit`,
    /// `manage`, `close`, `admin` or `work`): the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false, example = "manage"))]
    pub required_scope: Option<String>,
}
