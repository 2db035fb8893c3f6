//! Webhooks on SQLite: registrations, events and the delivery log.

use shared::model::EventState;
use sqlx::{SqliteConnection, SqliteExecutor, types::Json};

use crate::{
    rows::webhooks::{DueEventRow, MatchRow, NewWebhookRow, WebhookRow},
    sql::{EventTypes, Millis},
};

pub(crate) use crate::portable::sqlite::webhooks::*;

pub(crate) async fn insert(
    conn: &mut SqliteConnection,
    row: &NewWebhookRow<'_>,
) -> sqlx::Result<WebhookRow> {
    sqlx::query_as(sql!(
        "INSERT INTO webhooks (webhook_id, tenant_id, url, events, job_id, enabled, secret,
                               sealed_secret, secret_key_id, created_at)
         VALUES ($1, $2, $3, $4, $5, true, $6, $7, $8, $9)
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, created_at"
    ))
    .bind(&row.webhook_id)
    .bind(&row.new.tenant_id)
    .bind(&row.new.url)
    .bind(EventTypes::sqlite_text(&row.new.events))
    .bind(row.new.job_id.as_deref())
    .bind(row.secret.cleared)
    .bind(&row.secret.sealed_secret)
    .bind(&row.secret.secret_key_id)
    .bind(row.created_at)
    .fetch_one(conn)
    .await
}

/// The enabled webhooks of each job's tenant that hear of it (tenant-wide,
/// or for this job), by job.
pub(crate) async fn matching_webhooks(
    conn: &mut SqliteConnection,
    job_ids: &[String],
) -> sqlx::Result<Vec<MatchRow>> {
    sqlx::query_as(sql!(
        "SELECT j.job_id, w.webhook_id, w.events FROM webhooks w
         JOIN jobs j ON j.tenant_id = w.tenant_id
         WHERE j.job_id IN (SELECT value FROM json_each($1)) AND w.enabled
           AND (w.job_id IS NULL OR w.job_id = j.job_id)
         ORDER BY j.job_id, w.webhook_id"
    ))
    .bind(Json(job_ids))
    .fetch_all(conn)
    .await
}

/// Leases due events until `lease_until`; returns their ids. SQLite runs
/// one writing statement at a time, so no two dispatchers lease one event.
/// 'pending' stays a literal: only it matches the partial index
/// `webhook_events_due`.
pub(crate) async fn lease_due(
    db: impl SqliteExecutor<'_>,
    now: Millis,
    lease_until: Millis,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "UPDATE webhook_events SET next_attempt_at = $2 WHERE event_id IN (
             SELECT event_id FROM webhook_events
             WHERE state = 'pending' AND next_attempt_at <= $1
             ORDER BY next_attempt_at LIMIT $3
         ) RETURNING event_id"
    ))
    .bind(now)
    .bind(lease_until)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub(crate) async fn due_events(
    db: impl SqliteExecutor<'_>,
    event_ids: &[String],
) -> sqlx::Result<Vec<DueEventRow>> {
    sqlx::query_as(sql!(
        "SELECT e.event_id, e.webhook_id, e.event_type, e.body, e.attempts, w.url, w.secret,
                w.sealed_secret, w.secret_key_id, w.enabled, e.traceparent
         FROM webhook_events e JOIN webhooks w ON w.webhook_id = e.webhook_id
         WHERE e.event_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(event_ids))
    .fetch_all(db)
    .await
}

/// Ends the webhook's pending events: none will be sent.
pub(crate) async fn fail_pending_of(
    conn: &mut SqliteConnection,
    webhook_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE webhook_events SET state = $2 WHERE webhook_id = $1 AND state = $3"
    ))
    .bind(webhook_id)
    .bind(EventState::Failed.as_str())
    .bind(EventState::Pending.as_str())
    .execute(conn)
    .await?;
    Ok(())
}
