//! Webhooks on Postgres: registrations, events and the delivery log.

use shared::model::EventState;
use sqlx::{PgConnection, PgExecutor};

use crate::{
    sql::Millis,
    webhooks::{DeliveryRow, DueEvent, MatchRow, NewDelivery, NewEvent, NewWebhookRow, WebhookRow},
};

pub(crate) async fn count_for_job(
    conn: &mut PgConnection,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM webhooks WHERE tenant_id = $1 AND job_id = $2"
    ))
    .bind(tenant_id)
    .bind(job_id)
    .fetch_one(conn)
    .await
}

/// Marks the job, whose row the registration holds, as one a webhook of
/// its own watches: a success waiting for that row then sees the mark and
/// takes the way that writes events (migration `watched_jobs`).
pub(crate) async fn mark_job_watched(conn: &mut PgConnection, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET webhook_watched = true WHERE job_id = $1 AND NOT webhook_watched"
    ))
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The tenant's lock on its tenant-wide webhooks, until the transaction
/// ends: registrations count and insert one after the other.
pub(crate) async fn lock_tenant_webhooks(
    conn: &mut PgConnection,
    tenant_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
    ))
    .bind(format!("webhooks:{tenant_id}"))
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn count_for_tenant(
    conn: &mut PgConnection,
    tenant_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM webhooks WHERE tenant_id = $1 AND job_id IS NULL"
    ))
    .bind(tenant_id)
    .fetch_one(conn)
    .await
}

pub(crate) async fn insert(
    conn: &mut PgConnection,
    row: &NewWebhookRow<'_>,
) -> sqlx::Result<WebhookRow> {
    sqlx::query_as(sql!(
        "INSERT INTO webhooks (webhook_id, tenant_id, url, events, job_id, enabled, secret,
                               created_at)
         VALUES ($1, $2, $3, $4, $5, true, $6, $7)
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at"
    ))
    .bind(&row.webhook_id)
    .bind(&row.new.tenant_id)
    .bind(&row.new.url)
    .bind(&row.new.events)
    .bind(row.new.job_id.as_deref())
    .bind(&row.secret)
    .bind(row.created_at)
    .fetch_one(conn)
    .await
}

pub(crate) async fn get(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "SELECT webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at
         FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn list(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<WebhookRow>> {
    sqlx::query_as(sql!(
        "SELECT webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at
         FROM webhooks WHERE tenant_id = $1 AND webhook_id < $2
         ORDER BY webhook_id DESC LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub(crate) async fn enable(
    conn: &mut PgConnection,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "UPDATE webhooks SET enabled = true WHERE webhook_id = $1 AND tenant_id = $2
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn set_secret(
    conn: &mut PgConnection,
    tenant_id: &str,
    webhook_id: &str,
    secret: &str,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "UPDATE webhooks SET secret = $3 WHERE webhook_id = $1 AND tenant_id = $2
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .bind(secret)
    .fetch_optional(conn)
    .await
}

/// The webhook's events, locked in id order.
pub(crate) async fn lock_events_of(
    conn: &mut PgConnection,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT event_id FROM webhook_events WHERE webhook_id = $1
           AND webhook_id IN (SELECT webhook_id FROM webhooks WHERE tenant_id = $2)
         ORDER BY event_id FOR UPDATE"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn delete_events_of(
    conn: &mut PgConnection,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM webhook_events WHERE webhook_id = $1
           AND webhook_id IN (SELECT webhook_id FROM webhooks WHERE tenant_id = $2)"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the webhook (its log goes with it); returns the rows deleted.
pub(crate) async fn delete(
    conn: &mut PgConnection,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "DELETE FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .execute(conn)
    .await?
    .rows_affected())
}

pub(crate) async fn list_deliveries(
    db: impl PgExecutor<'_>,
    webhook_id: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<DeliveryRow>> {
    sqlx::query_as(sql!(
        "SELECT delivery_id, event_id, event_type, attempt, response_status, error, duration_ms,
                attempted_at, next_attempt_at
         FROM webhook_deliveries WHERE webhook_id = $1 AND delivery_id < $2
         ORDER BY delivery_id DESC LIMIT $3"
    ))
    .bind(webhook_id)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The enabled webhooks of each job's tenant that hear of it (tenant-wide,
/// or for this job), by job.
pub(crate) async fn matching_webhooks(
    conn: &mut PgConnection,
    job_ids: &[String],
) -> sqlx::Result<Vec<MatchRow>> {
    sqlx::query_as(sql!(
        "SELECT j.job_id, w.webhook_id, w.events FROM webhooks w
         JOIN jobs j ON j.tenant_id = w.tenant_id
         WHERE j.job_id = ANY ($1) AND w.enabled
           AND (w.job_id IS NULL OR w.job_id = j.job_id)
         ORDER BY j.job_id, w.webhook_id"
    ))
    .bind(job_ids)
    .fetch_all(conn)
    .await
}

pub(crate) async fn insert_event(
    conn: &mut PgConnection,
    event: &NewEvent<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO webhook_events (event_id, webhook_id, job_id, event_type, body, created_at,
                                     attempts, state, next_attempt_at, traceparent)
         VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $6,
                 COALESCE($8, (SELECT traceparent FROM jobs WHERE job_id = $3)))"
    ))
    .bind(&event.event_id)
    .bind(event.webhook_id)
    .bind(event.job_id)
    .bind(event.event_type)
    .bind(&event.body)
    .bind(event.created_at)
    .bind(EventState::Pending.as_str())
    .bind(event.traceparent)
    .execute(conn)
    .await?;
    Ok(())
}

/// Leases due events until `lease_until`; returns their ids. Events a
/// concurrent dispatcher is leasing are skipped, not waited for.
/// 'pending' stays a literal: only it matches the partial index
/// `webhook_events_due`.
pub(crate) async fn lease_due(
    db: impl PgExecutor<'_>,
    now: Millis,
    lease_until: Millis,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "UPDATE webhook_events SET next_attempt_at = $2 WHERE event_id IN (
             SELECT event_id FROM webhook_events
             WHERE state = 'pending' AND next_attempt_at <= $1
             ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED
         ) RETURNING event_id"
    ))
    .bind(now)
    .bind(lease_until)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub(crate) async fn due_events(
    db: impl PgExecutor<'_>,
    event_ids: &[String],
) -> sqlx::Result<Vec<DueEvent>> {
    sqlx::query_as(sql!(
        "SELECT e.event_id, e.webhook_id, e.event_type, e.body, e.attempts, w.url, w.secret,
                w.enabled, e.traceparent
         FROM webhook_events e JOIN webhooks w ON w.webhook_id = e.webhook_id
         WHERE e.event_id = ANY ($1)"
    ))
    .bind(event_ids)
    .fetch_all(db)
    .await
}

/// Moves a pending event on after an attempt; returns the rows changed
/// (0: the event is gone).
pub(crate) async fn record_attempt(
    conn: &mut PgConnection,
    event_id: &str,
    attempts: i64,
    state: EventState,
    next_attempt_at: Millis,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql!(
        "UPDATE webhook_events SET attempts = $2, state = $3, next_attempt_at = $4
         WHERE event_id = $1 AND state = $5"
    ))
    .bind(event_id)
    .bind(attempts)
    .bind(state.as_str())
    .bind(next_attempt_at)
    .bind(EventState::Pending.as_str())
    .execute(conn)
    .await?
    .rows_affected())
}

pub(crate) async fn insert_delivery(
    conn: &mut PgConnection,
    delivery: &NewDelivery<'_>,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO webhook_deliveries (delivery_id, webhook_id, event_id, event_type, attempt,
             response_status, error, duration_ms, attempted_at, next_attempt_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    ))
    .bind(&delivery.delivery_id)
    .bind(&delivery.event.webhook_id)
    .bind(&delivery.event.event_id)
    .bind(&delivery.event.event_type)
    .bind(delivery.attempt)
    .bind(delivery.record.response_status.map(i64::from))
    .bind(delivery.record.error.as_deref())
    .bind(delivery.record.duration_ms)
    .bind(delivery.attempted_at)
    .bind(delivery.record.next_attempt_at.map(Millis))
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn disable(conn: &mut PgConnection, webhook_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE webhooks SET enabled = false WHERE webhook_id = $1"
    ))
    .bind(webhook_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends the webhook's pending events: none will be sent.
pub(crate) async fn fail_pending_of(conn: &mut PgConnection, webhook_id: &str) -> sqlx::Result<()> {
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

pub(crate) async fn drop_event(db: impl PgExecutor<'_>, event_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE webhook_events SET state = $2 WHERE event_id = $1 AND state = $3"
    ))
    .bind(event_id)
    .bind(EventState::Failed.as_str())
    .bind(EventState::Pending.as_str())
    .execute(db)
    .await?;
    Ok(())
}
