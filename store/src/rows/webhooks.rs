//! Webhooks, their events and deliveries: the rows its statements read and write.

use crate::rows::secrets::{SealedSecret, StoredSecret};
use crate::sql::{EventTypes, Millis};
use crate::{DeliveryRecord, NewWebhook};

/// An event due for delivery, leased to one dispatcher.
#[derive(Debug, Clone)]
pub struct DueEvent {
    pub event_id: String,
    pub webhook_id: String,
    pub event_type: String,
    pub body: String,
    /// Attempts made before this one.
    pub attempts: i64,
    pub url: String,
    /// In clear, opened from its sealed form for this delivery.
    pub secret: String,
    pub enabled: bool,
    /// The W3C `traceparent` its deliveries continue, if traced.
    pub traceparent: Option<String>,
}

/// A due event as the statements read it: its webhook's secret as stored.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DueEventRow {
    pub(crate) event_id: String,
    pub(crate) webhook_id: String,
    pub(crate) event_type: String,
    pub(crate) body: String,
    pub(crate) attempts: i64,
    pub(crate) url: String,
    pub(crate) secret: Option<String>,
    pub(crate) sealed_secret: Option<String>,
    pub(crate) secret_key_id: Option<String>,
    pub(crate) enabled: bool,
    pub(crate) traceparent: Option<String>,
}

impl DueEventRow {
    pub(crate) fn stored_secret(&self) -> StoredSecret {
        StoredSecret {
            secret: self.secret.clone(),
            sealed_secret: self.sealed_secret.clone(),
            secret_key_id: self.secret_key_id.clone(),
        }
    }

    pub(crate) fn with_secret(self, secret: String) -> DueEvent {
        DueEvent {
            event_id: self.event_id,
            webhook_id: self.webhook_id,
            event_type: self.event_type,
            body: self.body,
            attempts: self.attempts,
            url: self.url,
            secret,
            enabled: self.enabled,
            traceparent: self.traceparent,
        }
    }
}

/// A webhook's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WebhookRow {
    pub(crate) webhook_id: String,
    pub(crate) tenant_id: String,
    pub(crate) url: String,
    pub(crate) events: EventTypes,
    pub(crate) job_id: Option<String>,
    pub(crate) enabled: bool,
    pub(crate) created_at: Millis,
}

/// A webhook that may hear of a job's final status.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MatchRow {
    pub(crate) job_id: String,
    pub(crate) webhook_id: String,
    pub(crate) events: EventTypes,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    pub(crate) delivery_id: String,
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) attempt: i64,
    pub(crate) response_status: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) duration_ms: i64,
    pub(crate) attempted_at: Millis,
    pub(crate) next_attempt_at: Option<Millis>,
}

/// A new webhook's row.
pub(crate) struct NewWebhookRow<'a> {
    pub webhook_id: String,
    pub new: &'a NewWebhook,
    pub secret: SealedSecret<'a>,
    pub created_at: Millis,
}

/// A new event's row: pending, due at once.
pub(crate) struct NewEvent<'a> {
    pub event_id: String,
    pub webhook_id: &'a str,
    pub job_id: &'a str,
    pub event_type: &'a str,
    /// The bytes every attempt signs and sends.
    pub body: String,
    pub created_at: Millis,
    /// The W3C `traceparent` its deliveries continue: the write's that
    /// made the event, or else its job's own.
    pub traceparent: Option<&'a str>,
}

/// An attempt's line in the delivery log.
pub(crate) struct NewDelivery<'a> {
    pub delivery_id: String,
    pub event: &'a DueEvent,
    pub attempt: i64,
    pub record: &'a DeliveryRecord,
    pub attempted_at: Millis,
}
