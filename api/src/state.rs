use queue::Queue;
use reports::Registry;
use shared::notify::Signals;
use store::{Store, Submission, Submitted, batch::Batcher};

use crate::{api_keys::ApiKeys, limits::Limits};

/// What every handler can reach.
pub struct AppState {
    pub store: Store,
    /// The group commit of submits.
    pub submits: Batcher<Submission, Submitted>,
    pub queue: Queue,
    pub registry: Registry,
    pub signals: Signals,
    /// Every valid API key, refreshed in the background.
    pub keys: ApiKeys,
    /// Per-tenant limits.
    pub limits: Limits,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// How long an idempotency key is remembered.
    pub idempotency_ttl: std::time::Duration,
    /// Whether webhook URLs may point at private addresses.
    pub webhook_allow_private: bool,
    /// The concurrency caps, which a parked job's `waiting` names.
    pub caps: shared::settings::Caps,
    /// The OpenAPI document (`crate::openapi::ApiDoc`) as `/openapi.json`
    /// serves it, written once at start.
    pub openapi: actix_web::web::Bytes,
    /// The worker protocol's lease, backoff, and wake of waiting leases.
    pub work: crate::routes::work::WorkSettings,
    /// Registered kinds' schemas, compiled once per declaration.
    pub schemas: reports::registered::CompiledSchemas,
    /// Cancelled at SIGTERM/SIGINT: long polls answer at once.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// `REQUEST_TIMEOUT` ([`crate::deadline`]).
    pub request_timeout: std::time::Duration,
    /// `API_KEYS` is set: the keys are that list, and the API makes none.
    pub keys_configured: bool,
}
