//! Webhooks, their events (the delivery outbox) and the delivery log.

use sqlx::{Row, any::AnyRow};

use super::{Dialect, Store, WriteTx, built, placeholders};
use crate::Result;
use shared::{
    ids::{new_id, new_webhook_secret},
    model::{EventState, Job, event_type_of},
    time::{now_ms, to_rfc3339},
};

#[derive(Debug, Clone)]
pub struct Webhook {
    pub webhook_id: String,
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
    pub enabled: bool,
    pub secret: String,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
}

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
    pub secret: String,
    pub enabled: bool,
}

/// One delivery attempt's outcome, as the dispatcher records it.
#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: i64,
    /// `None`: no further attempt (delivered, given up, or webhook gone).
    pub next_attempt_at: Option<i64>,
    pub delivered: bool,
    /// The receiver answered 410: disable the webhook.
    pub gone: bool,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    pub event_id: String,
    pub event_type: String,
    pub attempt: i64,
    pub response_status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub attempted_at: i64,
    pub next_attempt_at: Option<i64>,
}

const WEBHOOK_COLUMNS: &str =
    "webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at";

fn webhook_from_row(row: &AnyRow) -> Result<Webhook> {
    let events: String = row.try_get("events")?;
    Ok(Webhook {
        webhook_id: row.try_get("webhook_id")?,
        tenant_id: row.try_get("tenant_id")?,
        url: row.try_get("url")?,
        events: events
            .split(',')
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect(),
        job_id: row.try_get("job_id")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        secret: row.try_get("secret")?,
        created_at: row.try_get("created_at")?,
    })
}

/// Events stored with a comma on each side, so `LIKE '%,job.failed,%'` matches exactly.
fn events_column(events: &[String]) -> String {
    format!(",{},", events.join(","))
}

/// A `COUNT(*) AS n` of the tenant's webhooks (and of one job's), read in
/// the registration's transaction.
async fn count_in(
    tx: &mut WriteTx,
    sql: &'static str,
    tenant_id: &str,
    job_id: Option<&str>,
) -> Result<i64> {
    let mut query = sqlx::query(sql).bind(tenant_id);
    if let Some(job_id) = job_id {
        query = query.bind(job_id);
    }
    let row = query.fetch_one(&mut **tx).await?;
    Ok(row.try_get("n")?)
}

/// The most webhooks a registration may make: for all the tenant's jobs,
/// and for one job.
#[derive(Debug, Clone, Copy)]
pub struct WebhookCaps {
    pub per_tenant: i64,
    pub per_job: i64,
}

/// What a registration did.
#[derive(Debug)]
pub enum Registration {
    Registered(Webhook),
    /// No such job of the tenant.
    NoJob,
    /// The tenant has this many webhooks for all its jobs, its cap.
    TenantFull(i64),
    /// The job has this many webhooks, its cap.
    JobFull(i64),
}

impl Store {
    /// Registers a webhook, within `caps`. A per-job webhook locks its
    /// job's row first, so it and the job's final-status transaction run
    /// one after the other: either the final status sees the webhook and
    /// makes the event, or the webhook sees the final status and makes it
    /// here; that lock also orders registrations for the same job, so the
    /// count is exact. A tenant-wide one takes the tenant's webhook lock
    /// (Postgres; SQLite has one writer at a time) for the same reason.
    pub async fn register_webhook(
        &self,
        tx: &mut WriteTx,
        new: &NewWebhook,
        caps: WebhookCaps,
    ) -> Result<Registration> {
        let mut final_job = None;
        if let Some(job_id) = &new.job_id {
            let Some(job) = self.lock_job(tx, &new.tenant_id, job_id).await? else {
                return Ok(Registration::NoJob);
            };
            let count = count_in(
                tx,
                "SELECT COUNT(*) AS n FROM webhooks WHERE tenant_id = $1 AND job_id = $2",
                &new.tenant_id,
                Some(job_id),
            )
            .await?;
            if count >= caps.per_job {
                return Ok(Registration::JobFull(count));
            }
            if job.status.is_final() {
                final_job = Some(job);
            }
        } else {
            if self.dialect == Dialect::Postgres {
                sqlx::query("SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l")
                    .bind(format!("webhooks:{}", new.tenant_id))
                    .execute(&mut **tx)
                    .await?;
            }
            let count = count_in(
                tx,
                "SELECT COUNT(*) AS n FROM webhooks WHERE tenant_id = $1 AND job_id IS NULL",
                &new.tenant_id,
                None,
            )
            .await?;
            if count >= caps.per_tenant {
                return Ok(Registration::TenantFull(count));
            }
        }
        let row = sqlx::query(built(&format!(
            "INSERT INTO webhooks (webhook_id, tenant_id, url, events, job_id, enabled, secret, created_at)
             VALUES ($1, $2, $3, $4, $5, 1, $6, $7) RETURNING {WEBHOOK_COLUMNS}"
        )))
        .bind(new_id("wh_"))
        .bind(&new.tenant_id)
        .bind(&new.url)
        .bind(events_column(&new.events))
        .bind(new.job_id.as_deref())
        .bind(new_webhook_secret())
        .bind(now_ms())
        .fetch_one(&mut **tx)
        .await?;
        let webhook = webhook_from_row(&row)?;
        if let Some(job) = final_job
            && let Some(event_type) = event_type_of(job.status)
            && webhook.events.iter().any(|e| e == event_type)
        {
            insert_event(tx, &webhook.webhook_id, event_type, &job).await?;
        }
        Ok(Registration::Registered(webhook))
    }

    pub async fn get_webhook(&self, tenant_id: &str, webhook_id: &str) -> Result<Option<Webhook>> {
        let row = sqlx::query(built(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2"
        )))
        .bind(webhook_id)
        .bind(tenant_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    /// Newest first, one more than `limit` to tell whether a next page exists.
    pub async fn list_webhooks(
        &self,
        tenant_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(built(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks
             WHERE tenant_id = $1 AND ($2 = '' OR webhook_id < $2)
             ORDER BY webhook_id DESC LIMIT $3"
        )))
        .bind(tenant_id)
        .bind(before.unwrap_or(""))
        .bind(limit + 1)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(webhook_from_row).collect()
    }

    /// Enables a webhook again (a 410 answer disabled it). Only events of
    /// jobs that end from now on are sent: those dropped while it was
    /// disabled stay failed. `None`: no such webhook of the tenant.
    pub async fn enable_webhook(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        webhook_id: &str,
    ) -> Result<Option<Webhook>> {
        update_webhook(tx, tenant_id, webhook_id, "enabled = 1", None).await
    }

    /// Gives a webhook a new secret; the old one stops signing at once,
    /// pending events' next attempts included (each attempt is signed
    /// when it is sent). `None`: no such webhook of the tenant.
    pub async fn rotate_webhook_secret(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        webhook_id: &str,
    ) -> Result<Option<Webhook>> {
        let secret = new_webhook_secret();
        update_webhook(tx, tenant_id, webhook_id, "secret = $3", Some(&secret)).await
    }

    /// Deletes a webhook and, with it, its pending events and its log.
    pub async fn delete_webhook(&self, tenant_id: &str, webhook_id: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // Events first, as a delivery being recorded locks its event before
        // its webhook: the same order here, so the two queue instead of
        // deadlocking (the cascade would take the webhook row first). In id
        // order, as the retention pruner takes a job's events.
        if self.dialect == super::Dialect::Postgres {
            sqlx::query(
                "SELECT event_id FROM webhook_events WHERE webhook_id = $1
                   AND webhook_id IN (SELECT webhook_id FROM webhooks WHERE tenant_id = $2)
                 ORDER BY event_id FOR UPDATE",
            )
            .bind(webhook_id)
            .bind(tenant_id)
            .fetch_all(&mut *tx)
            .await?;
        }
        sqlx::query(
            "DELETE FROM webhook_events WHERE webhook_id = $1
               AND webhook_id IN (SELECT webhook_id FROM webhooks WHERE tenant_id = $2)",
        )
        .bind(webhook_id)
        .bind(tenant_id)
        .execute(&mut *tx)
        .await?;
        let deleted = sqlx::query("DELETE FROM webhooks WHERE webhook_id = $1 AND tenant_id = $2")
            .bind(webhook_id)
            .bind(tenant_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        tx.commit().await?;
        Ok(deleted)
    }

    /// A webhook's delivery log, newest first.
    pub async fn list_deliveries(
        &self,
        webhook_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        let rows = sqlx::query(
            "SELECT delivery_id, event_id, event_type, attempt, response_status, error, duration_ms,
                    attempted_at, next_attempt_at
             FROM webhook_deliveries WHERE webhook_id = $1 AND ($2 = '' OR delivery_id < $2)
             ORDER BY delivery_id DESC LIMIT $3",
        )
        .bind(webhook_id)
        .bind(before.unwrap_or(""))
        .bind(limit + 1)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Delivery {
                    delivery_id: row.try_get("delivery_id")?,
                    event_id: row.try_get("event_id")?,
                    event_type: row.try_get("event_type")?,
                    attempt: row.try_get("attempt")?,
                    response_status: row.try_get("response_status")?,
                    error: row.try_get("error")?,
                    duration_ms: row.try_get("duration_ms")?,
                    attempted_at: row.try_get("attempted_at")?,
                    next_attempt_at: row.try_get("next_attempt_at")?,
                })
            })
            .collect()
    }

    /// In a final-status transaction: one event per matching enabled
    /// webhook of the job's tenant (tenant-wide, or for this job).
    pub(super) async fn create_events(&self, tx: &mut WriteTx, job_ids: &[String]) -> Result<()> {
        let sql = format!(
            "SELECT j.job_id, w.webhook_id, w.events FROM webhooks w
             JOIN jobs j ON j.tenant_id = w.tenant_id
             WHERE j.job_id IN ({}) AND w.enabled = 1 AND (w.job_id IS NULL OR w.job_id = j.job_id)
             ORDER BY j.job_id, w.webhook_id",
            placeholders(1, job_ids.len())
        );
        let mut query = sqlx::query(built(&sql));
        for job_id in job_ids {
            query = query.bind(job_id);
        }
        let rows = query.fetch_all(&mut **tx).await?;
        let mut job: Option<Job> = None;
        for row in &rows {
            let job_id: String = row.try_get("job_id")?;
            if job.as_ref().is_none_or(|job| job.job_id != job_id) {
                job = self.job_in(tx, &job_id).await?;
            }
            let Some(job) = &job else { continue };
            let Some(event_type) = event_type_of(job.status) else {
                continue;
            };
            let events: String = row.try_get("events")?;
            if events.contains(&format!(",{event_type},")) {
                let webhook_id: String = row.try_get("webhook_id")?;
                insert_event(tx, &webhook_id, event_type, job).await?;
            }
        }
        Ok(())
    }

    /// Leases up to `limit` due events until `lease_until` (past any
    /// delivery's timeout), so concurrent dispatchers never send one twice.
    pub async fn claim_due_events(&self, limit: i64, lease_until: i64) -> Result<Vec<DueEvent>> {
        let _turn = self.write_turn().await;
        // 'pending' stays a literal: only it matches the partial index webhook_events_due.
        let claimed = sqlx::query(built(&format!(
            "UPDATE webhook_events SET next_attempt_at = $2 WHERE event_id IN (
                 SELECT event_id FROM webhook_events WHERE state = 'pending' AND next_attempt_at <= $1
                 ORDER BY next_attempt_at LIMIT $3{}
             ) RETURNING event_id",
            self.dialect.skip_locked()
        )))
        .bind(now_ms())
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT e.event_id, e.webhook_id, e.event_type, e.body, e.attempts, w.url, w.secret, w.enabled
             FROM webhook_events e JOIN webhooks w ON w.webhook_id = e.webhook_id
             WHERE e.event_id IN ({})",
            placeholders(1, claimed.len())
        );
        let mut query = sqlx::query(built(&sql));
        for row in &claimed {
            query = query.bind(row.try_get::<String, _>("event_id")?);
        }
        let mut due = Vec::with_capacity(claimed.len());
        for row in query.fetch_all(&self.pool).await? {
            due.push(DueEvent {
                event_id: row.try_get("event_id")?,
                webhook_id: row.try_get("webhook_id")?,
                event_type: row.try_get("event_type")?,
                body: row.try_get("body")?,
                attempts: row.try_get("attempts")?,
                url: row.try_get("url")?,
                secret: row.try_get("secret")?,
                enabled: row.try_get::<i64, _>("enabled")? != 0,
            });
        }
        Ok(due)
    }

    /// Logs an attempt and moves its event on, in one transaction; a 410
    /// also disables the webhook and drops its other pending events.
    pub async fn record_delivery(&self, event: &DueEvent, record: &DeliveryRecord) -> Result<()> {
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        let attempt = event.attempts + 1;
        let state = if record.delivered {
            EventState::Delivered
        } else if record.next_attempt_at.is_some() {
            EventState::Pending
        } else {
            EventState::Failed
        };
        let updated = sqlx::query(
            "UPDATE webhook_events SET attempts = $2, state = $3, next_attempt_at = $4
             WHERE event_id = $1 AND state = $5",
        )
        .bind(&event.event_id)
        .bind(attempt)
        .bind(state.as_str())
        .bind(record.next_attempt_at.unwrap_or(now))
        .bind(EventState::Pending.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            // The webhook was deleted meanwhile: nothing to log against.
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO webhook_deliveries (delivery_id, webhook_id, event_id, event_type, attempt,
                 response_status, error, duration_ms, attempted_at, next_attempt_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(new_id(""))
        .bind(&event.webhook_id)
        .bind(&event.event_id)
        .bind(&event.event_type)
        .bind(attempt)
        .bind(record.response_status.map(i64::from))
        .bind(record.error.as_deref())
        .bind(record.duration_ms)
        .bind(now)
        .bind(record.next_attempt_at)
        .execute(&mut *tx)
        .await?;
        if record.gone {
            sqlx::query("UPDATE webhooks SET enabled = 0 WHERE webhook_id = $1")
                .bind(&event.webhook_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE webhook_events SET state = $2 WHERE webhook_id = $1 AND state = $3",
            )
            .bind(&event.webhook_id)
            .bind(EventState::Failed.as_str())
            .bind(EventState::Pending.as_str())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Ends an event whose webhook was disabled before its turn came.
    pub async fn drop_event(&self, event_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE webhook_events SET state = $2 WHERE event_id = $1 AND state = $3")
            .bind(event_id)
            .bind(EventState::Failed.as_str())
            .bind(EventState::Pending.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Sets `assignment` (a constant, with `$3` for `value`) on one webhook of
/// the tenant, and returns it as it is now.
async fn update_webhook(
    tx: &mut WriteTx,
    tenant_id: &str,
    webhook_id: &str,
    assignment: &str,
    value: Option<&str>,
) -> Result<Option<Webhook>> {
    let sql = format!(
        "UPDATE webhooks SET {assignment} WHERE webhook_id = $1 AND tenant_id = $2
         RETURNING {WEBHOOK_COLUMNS}"
    );
    let mut query = sqlx::query(built(&sql)).bind(webhook_id).bind(tenant_id);
    if let Some(value) = value {
        query = query.bind(value);
    }
    let row = query.fetch_optional(&mut **tx).await?;
    row.as_ref().map(webhook_from_row).transpose()
}

async fn insert_event(
    tx: &mut WriteTx,
    webhook_id: &str,
    event_type: &str,
    job: &Job,
) -> Result<()> {
    let now = now_ms();
    let body = serde_json::json!({
        "type": event_type,
        "timestamp": to_rfc3339(now),
        "data": job.to_object(),
    })
    .to_string();
    sqlx::query(
        "INSERT INTO webhook_events (event_id, webhook_id, job_id, event_type, body, created_at, attempts, state, next_attempt_at)
         VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $6)",
    )
    .bind(new_id("evt_"))
    .bind(webhook_id)
    .bind(&job.job_id)
    .bind(event_type)
    .bind(body)
    .bind(now)
    .bind(EventState::Pending.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
