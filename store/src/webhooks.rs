//! Webhooks, their events (the delivery outbox) and the delivery log.

use shared::{
    ids::{new_id, new_webhook_secret},
    model::{EventState, Job, event_type_of},
    time::{now_ms, to_rfc3339},
};

use crate::{
    Actor, AuditAction, AuditChange, Result, Store, TxConnection, WriteTx, on_pool, on_tx,
    postgres, secrets::webhook_context, sql::Millis, sqlite,
};

pub use crate::rows::webhooks::DueEvent;
pub(crate) use crate::rows::webhooks::{
    DeliveryRow, NewDelivery, NewEvent, NewWebhookRow, WebhookRow,
};

#[derive(Debug, Clone)]
pub struct Webhook {
    pub webhook_id: String,
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
    pub enabled: bool,
    /// In clear, only where it was just made (registering, rotating the
    /// secret): it is stored sealed, and opened only to sign.
    pub secret: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub job_id: Option<String>,
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

impl From<WebhookRow> for Webhook {
    fn from(row: WebhookRow) -> Self {
        Webhook {
            webhook_id: row.webhook_id,
            tenant_id: row.tenant_id,
            url: row.url,
            events: row.events.into(),
            job_id: row.job_id,
            enabled: row.enabled,
            secret: None,
            created_at: row.created_at.into(),
        }
    }
}

impl From<DeliveryRow> for Delivery {
    fn from(row: DeliveryRow) -> Self {
        Delivery {
            delivery_id: row.delivery_id,
            event_id: row.event_id,
            event_type: row.event_type,
            attempt: row.attempt,
            response_status: row.response_status,
            error: row.error,
            duration_ms: row.duration_ms,
            attempted_at: row.attempted_at.into(),
            next_attempt_at: row.next_attempt_at.map(i64::from),
        }
    }
}

impl Store {
    /// Registers a webhook, within `caps`. A per-job webhook locks its
    /// job's row first (on Postgres it marks the row `webhook_watched`,
    /// which a success statement waiting for the row sees), so it and the
    /// job's final-status write run one after the other: either the final
    /// status sees the webhook and makes the event, or the webhook sees the
    /// final status and makes it here; that lock also orders registrations
    /// for the same job, so the count is exact. A tenant-wide one takes the
    /// tenant's webhook lock (Postgres; SQLite has one writer at a time) for
    /// the same reason.
    pub async fn register_webhook(
        &self,
        tx: &mut WriteTx,
        new: &NewWebhook,
        caps: WebhookCaps,
    ) -> Result<Registration> {
        let tenant_id = new.tenant_id.as_str();
        let mut final_job = None;
        match new.job_id.as_deref() {
            Some(job_id) => {
                let Some(job) = self.lock_job(tx, tenant_id, job_id).await? else {
                    return Ok(Registration::NoJob);
                };
                let count = on_tx!(tx,
                    conn => postgres::webhooks::count_for_job(conn, tenant_id, job_id).await?,
                    conn => sqlite::webhooks::count_for_job(conn, tenant_id, job_id).await?,
                );
                if count >= caps.per_job {
                    return Ok(Registration::JobFull(count));
                }
                if job.status.is_final() {
                    final_job = Some(job);
                } else if let TxConnection::Postgres(conn) = tx.connection() {
                    // On Postgres a success may end without a transaction
                    // of its own (`Store::finish_succeeded`); the mark on
                    // the row sends this job's success the way that writes
                    // events.
                    postgres::webhooks::mark_job_watched(conn, job_id).await?;
                }
            }
            None => {
                let count = on_tx!(tx,
                    conn => {
                        postgres::webhooks::lock_tenant_webhooks(conn, tenant_id).await?;
                        postgres::webhooks::count_for_tenant(conn, tenant_id).await?
                    },
                    conn => sqlite::webhooks::count_for_tenant(conn, tenant_id).await?,
                );
                if count >= caps.per_tenant {
                    return Ok(Registration::TenantFull(count));
                }
            }
        }
        let webhook_id = new_id("wh_");
        let secret = new_webhook_secret();
        let row = NewWebhookRow {
            secret: self
                .seal_in(tx, &webhook_context(&webhook_id), &secret)
                .await?,
            webhook_id,
            new,
            created_at: Millis(now_ms()),
        };
        let mut webhook = Webhook::from(on_tx!(tx,
            conn => postgres::webhooks::insert(conn, &row).await?,
            conn => sqlite::webhooks::insert(conn, &row).await?,
        ));
        webhook.secret = Some(secret);
        if let Some(job) = final_job
            && let Some(event_type) = event_type_of(job.status)
            && webhook.events.iter().any(|e| e == event_type)
        {
            // Delivered in the job's own trace.
            insert_event(tx, &webhook.webhook_id, event_type, &job, None).await?;
        }
        Ok(Registration::Registered(webhook))
    }

    /// A webhook's secret, opened: what a replay of its registration or
    /// rotation shows, since no answer is stored with a secret in it.
    /// `None`: no such webhook of the tenant.
    pub async fn webhook_secret(
        &self,
        tenant_id: &str,
        webhook_id: &str,
    ) -> Result<Option<String>> {
        let stored = on_pool!(self,
            pool => postgres::webhooks::stored_secret(pool, tenant_id, webhook_id).await?,
            pool => sqlite::webhooks::stored_secret(pool, tenant_id, webhook_id).await?,
        );
        match stored {
            Some(stored) => Ok(Some(
                self.open_secret(&webhook_context(webhook_id), &stored)
                    .await?,
            )),
            None => Ok(None),
        }
    }

    pub async fn get_webhook(&self, tenant_id: &str, webhook_id: &str) -> Result<Option<Webhook>> {
        let row = on_pool!(self,
            pool => postgres::webhooks::get(pool, tenant_id, webhook_id).await?,
            pool => sqlite::webhooks::get(pool, tenant_id, webhook_id).await?,
        );
        Ok(row.map(Webhook::from))
    }

    /// Newest first, one more than `limit` to tell whether a next page
    /// exists. The cursor defaults to an id above every id.
    pub async fn list_webhooks(
        &self,
        tenant_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Webhook>> {
        let before = before.unwrap_or("~");
        let rows = on_pool!(self,
            pool => postgres::webhooks::list(pool, tenant_id, before, limit + 1).await?,
            pool => sqlite::webhooks::list(pool, tenant_id, before, limit + 1).await?,
        );
        Ok(rows.into_iter().map(Webhook::from).collect())
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
        let row = on_tx!(tx,
            conn => postgres::webhooks::enable(conn, tenant_id, webhook_id).await?,
            conn => sqlite::webhooks::enable(conn, tenant_id, webhook_id).await?,
        );
        Ok(row.map(Webhook::from))
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
        let sealed = self
            .seal_in(tx, &webhook_context(webhook_id), &secret)
            .await?;
        let row = on_tx!(tx,
            conn => postgres::webhooks::set_secret(conn, tenant_id, webhook_id, &sealed).await?,
            conn => sqlite::webhooks::set_secret(conn, tenant_id, webhook_id, &sealed).await?,
        );
        Ok(row.map(|row| Webhook {
            secret: Some(secret),
            ..Webhook::from(row)
        }))
    }

    /// Deletes a webhook and, with it, its pending events and its log.
    pub async fn delete_webhook(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        actor: &Actor,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // Events first, as a delivery being recorded locks its event before
        // its webhook: the same order here, so the two queue instead of
        // deadlocking (the cascade would take the webhook row first). In id
        // order, as the retention pruner takes a job's events.
        let deleted = on_tx!(tx,
            conn => {
                postgres::webhooks::lock_events_of(&mut *conn, tenant_id, webhook_id).await?;
                postgres::webhooks::delete_events_of(&mut *conn, tenant_id, webhook_id).await?;
                postgres::webhooks::delete(conn, tenant_id, webhook_id).await?
            },
            conn => {
                sqlite::webhooks::delete_events_of(&mut *conn, tenant_id, webhook_id).await?;
                sqlite::webhooks::delete(conn, tenant_id, webhook_id).await?
            },
        );
        if deleted == 1 {
            let change = AuditChange {
                tenant_id: Some(tenant_id),
                action: AuditAction::WebhookDeleted,
                target: Some(webhook_id),
                details: serde_json::json!({}),
            };
            self.audit(&mut tx, actor, &change).await?;
        }
        tx.commit().await?;
        Ok(deleted == 1)
    }

    /// A webhook's delivery log, newest first, one more than `limit`. The
    /// cursor defaults to an id above every id.
    pub async fn list_deliveries(
        &self,
        webhook_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        let before = before.unwrap_or("~");
        let rows = on_pool!(self,
            pool => postgres::webhooks::list_deliveries(pool, webhook_id, before, limit + 1).await?,
            pool => sqlite::webhooks::list_deliveries(pool, webhook_id, before, limit + 1).await?,
        );
        Ok(rows.into_iter().map(Delivery::from).collect())
    }

    /// In a final-status transaction: one event per matching enabled
    /// webhook of each job's tenant (tenant-wide, or for this job).
    /// `traceparent` names, for a job, the span of the write that made its
    /// events (their deliveries join its trace); a job it does not name
    /// gets its own trace's.
    pub(crate) async fn create_events<'t>(
        &self,
        tx: &mut WriteTx,
        job_ids: &[String],
        traceparent: impl Fn(&str) -> Option<&'t str>,
    ) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        let matches = on_tx!(tx,
            conn => postgres::webhooks::matching_webhooks(conn, job_ids).await?,
            conn => sqlite::webhooks::matching_webhooks(conn, job_ids).await?,
        );
        let mut job: Option<Job> = None;
        for matched in &matches {
            if job.as_ref().is_none_or(|job| job.job_id != matched.job_id) {
                job = self.job_in(tx, &matched.job_id).await?;
            }
            let Some(job) = &job else { continue };
            let Some(event_type) = event_type_of(job.status) else {
                continue;
            };
            if matched.events.0.iter().any(|e| e == event_type) {
                let traceparent = traceparent(&job.job_id);
                insert_event(tx, &matched.webhook_id, event_type, job, traceparent).await?;
            }
        }
        Ok(())
    }

    /// Leases up to `limit` due events until `lease_until` (past any
    /// delivery's timeout), so concurrent dispatchers never send one twice.
    /// Each comes with its webhook's secret opened. An event whose secret
    /// cannot be opened here (its master key is not in this process's
    /// `RECEIPT_MASTER_KEYS`) is not returned: it stays leased, and comes
    /// due again when the lease lapses, for a process that holds the key.
    /// It is never sent unsigned, and no attempt of it is counted.
    pub async fn claim_due_events(&self, limit: i64, lease_until: i64) -> Result<Vec<DueEvent>> {
        let now = Millis(now_ms());
        let lease_until = Millis(lease_until);
        let _turn = self.write_turn().await;
        let claimed = on_pool!(self,
            pool => postgres::webhooks::lease_due(pool, now, lease_until, limit).await?,
            pool => sqlite::webhooks::lease_due(pool, now, lease_until, limit).await?,
        );
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let rows = on_pool!(self,
            pool => postgres::webhooks::due_events(pool, &claimed).await?,
            pool => sqlite::webhooks::due_events(pool, &claimed).await?,
        );
        let mut due = Vec::with_capacity(rows.len());
        for row in rows {
            let context = webhook_context(&row.webhook_id);
            match self.open_secret(&context, &row.stored_secret()).await {
                Ok(secret) => due.push(row.with_secret(secret)),
                Err(error) => tracing::warn!(
                    %error,
                    event_id = row.event_id,
                    "cannot open the webhook's secret: the event waits, unsent, for a process \
                     whose RECEIPT_MASTER_KEYS holds its master key"
                ),
            }
        }
        Ok(due)
    }

    /// Logs an attempt and moves its event on, in one transaction; a 410
    /// also disables the webhook and drops its other pending events.
    pub async fn record_delivery(&self, event: &DueEvent, record: &DeliveryRecord) -> Result<()> {
        let now = Millis(now_ms());
        let mut tx = self.begin_write().await?;
        let attempt = event.attempts + 1;
        let state = if record.delivered {
            EventState::Delivered
        } else if record.next_attempt_at.is_some() {
            EventState::Pending
        } else {
            EventState::Failed
        };
        let next_attempt_at = record.next_attempt_at.map_or(now, Millis);
        let updated = on_tx!(tx,
            conn => postgres::webhooks::record_attempt(
                conn, &event.event_id, attempt, state, next_attempt_at,
            ).await?,
            conn => sqlite::webhooks::record_attempt(
                conn, &event.event_id, attempt, state, next_attempt_at,
            ).await?,
        );
        if updated == 0 {
            // The webhook was deleted meanwhile: nothing to log against.
            return Ok(());
        }
        let delivery = NewDelivery {
            delivery_id: new_id(""),
            event,
            attempt,
            record,
            attempted_at: now,
        };
        on_tx!(tx,
            conn => postgres::webhooks::insert_delivery(conn, &delivery).await?,
            conn => sqlite::webhooks::insert_delivery(conn, &delivery).await?,
        );
        if record.gone {
            on_tx!(tx,
                conn => {
                    postgres::webhooks::disable(&mut *conn, &event.webhook_id).await?;
                    postgres::webhooks::fail_pending_of(conn, &event.webhook_id).await?;
                },
                conn => {
                    sqlite::webhooks::disable(&mut *conn, &event.webhook_id).await?;
                    sqlite::webhooks::fail_pending_of(conn, &event.webhook_id).await?;
                },
            );
        }
        tx.commit().await?;
        Ok(())
    }

    /// Ends an event whose webhook was disabled before its turn came.
    pub async fn drop_event(&self, event_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        on_pool!(self,
            pool => postgres::webhooks::drop_event(pool, event_id).await?,
            pool => sqlite::webhooks::drop_event(pool, event_id).await?,
        );
        Ok(())
    }
}

/// An event of the job's final status for one webhook. Its body is made
/// here, once: every attempt sends these bytes under the same id.
async fn insert_event(
    tx: &mut WriteTx,
    webhook_id: &str,
    event_type: &str,
    job: &Job,
    traceparent: Option<&str>,
) -> Result<()> {
    let now = now_ms();
    let body = serde_json::json!({
        "type": event_type,
        "timestamp": to_rfc3339(now),
        "data": job.to_object(),
    })
    .to_string();
    let event = NewEvent {
        event_id: new_id("evt_"),
        webhook_id,
        job_id: &job.job_id,
        event_type,
        body,
        created_at: Millis(now),
        traceparent,
    };
    on_tx!(tx,
        conn => postgres::webhooks::insert_event(conn, &event).await?,
        conn => sqlite::webhooks::insert_event(conn, &event).await?,
    );
    tx.wrote_events();
    Ok(())
}
