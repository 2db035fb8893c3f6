//! Webhooks, their events and deliveries, the statements written once for
//! both databases (see `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use shared::model::EventState;
use crate::{
    sql::Millis,
    rows::secrets::{SealedSecret, StoredSecret},
    rows::webhooks::{DeliveryRow, NewDelivery, NewEvent, WebhookRow},
};

pub(crate) async fn count_for_job(
    conn: &mut Conn,
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

pub(crate) async fn count_for_tenant(
    conn: &mut Conn,
    tenant_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM webhooks WHERE tenant_id = $1 AND job_id IS NULL"
    ))
    .bind(tenant_id)
    .fetch_one(conn)
    .await
}

/// A webhook's secret as stored (sealed, or in clear from a release
/// before).
pub(crate) async fn stored_secret(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<StoredSecret>> {
    sqlx::query_as(sql!(
        "SELECT secret, sealed_secret, secret_key_id
         FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "SELECT webhook_id, tenant_id, url, events, job_id, enabled, created_at
         FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn list(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<WebhookRow>> {
    sqlx::query_as(sql!(
        "SELECT webhook_id, tenant_id, url, events, job_id, enabled, created_at
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
    conn: &mut Conn,
    tenant_id: &str,
    webhook_id: &str,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "UPDATE webhooks SET enabled = true WHERE webhook_id = $1 AND tenant_id = $2
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, created_at"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn set_secret(
    conn: &mut Conn,
    tenant_id: &str,
    webhook_id: &str,
    secret: &SealedSecret<'_>,
) -> sqlx::Result<Option<WebhookRow>> {
    sqlx::query_as(sql!(
        "UPDATE webhooks SET secret = $3, sealed_secret = $4, secret_key_id = $5
         WHERE webhook_id = $1 AND tenant_id = $2
         RETURNING webhook_id, tenant_id, url, events, job_id, enabled, created_at"
    ))
    .bind(webhook_id)
    .bind(tenant_id)
    .bind(secret.cleared)
    .bind(&secret.sealed_secret)
    .bind(&secret.secret_key_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn delete_events_of(
    conn: &mut Conn,
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
    conn: &mut Conn,
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
    db: impl Executor<'_, Database = Db>,
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

pub(crate) async fn insert_event(
    conn: &mut Conn,
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

/// Moves a pending event on after an attempt; returns the rows changed
/// (0: the event is gone).
pub(crate) async fn record_attempt(
    conn: &mut Conn,
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
    conn: &mut Conn,
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

pub(crate) async fn disable(conn: &mut Conn, webhook_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE webhooks SET enabled = false WHERE webhook_id = $1"
    ))
    .bind(webhook_id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn drop_event(db: impl Executor<'_, Database = Db>, event_id: &str) -> sqlx::Result<()> {
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
