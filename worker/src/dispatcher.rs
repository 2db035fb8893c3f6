//! The webhook dispatcher: delivers due events as signed POSTs (Standard
//! Webhooks), many at once so one slow receiver holds up no other, retries
//! along `WEBHOOK_RETRY_SCHEDULE`, and logs every attempt. Several
//! dispatchers may run at once: an event is leased before it is sent.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use outbound::{SignedPost, signed_post};
use rand::Rng;
use shared::{
    notify::Signals,
    settings::Settings,
    time::{duration_ms, now_ms},
};
use store::{DeliveryRecord, DueEvent, Store};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Deliveries one process makes at once.
const CONCURRENT_DELIVERIES: usize = 64;
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Under load the dispatcher looks at most this often, not once per
/// commit that wrote events.
const MIN_GAP: Duration = Duration::from_millis(20);

#[derive(Clone)]
pub struct Dispatcher {
    store: Store,
    schedule: Arc<Vec<Duration>>,
    allow_private: bool,
    timeout: Duration,
}

impl Dispatcher {
    pub fn new(store: Store, settings: &Settings) -> Self {
        Self {
            store,
            schedule: Arc::new(settings.webhook_retry_schedule.0.clone()),
            allow_private: settings.webhook_allow_private,
            timeout: settings.webhook_timeout,
        }
    }

    pub async fn run(self, signals: Signals, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(CONCURRENT_DELIVERIES));
        // A delivery in flight keeps its lease: longer than any attempt.
        let lease = self.timeout + Duration::from_secs(5);
        loop {
            // Taken before the look: events committed during it move the
            // count, and wake the next look.
            let seen = self.store.events_committed();
            let free = slots.available_permits() as i64;
            let mut claimed_all = false;
            if free > 0 {
                match self
                    .store
                    .claim_due_events(free, now_ms() + duration_ms(lease))
                    .await
                {
                    Ok(events) => {
                        claimed_all = events.len() as i64 == free;
                        for event in events {
                            let Ok(permit) = slots.clone().acquire_owned().await else {
                                return;
                            };
                            let dispatcher = self.clone();
                            tokio::spawn(async move {
                                dispatcher.deliver(event).await;
                                drop(permit);
                            });
                        }
                    }
                    Err(error) => warn!(%error, "claiming webhook events failed"),
                }
            }
            if claimed_all {
                // More may be due: go again once a slot frees.
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = slots.acquire() => continue,
                }
            }
            let looked = tokio::time::Instant::now();
            // A job's end in this process wakes a look only if some commit
            // wrote events since the last one: most ends (every success no
            // webhook watches) write none.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = signals.events_wait() => break,
                    () = signals.finishes_wait() => {
                        if self.store.events_committed() != seen {
                            break;
                        }
                    }
                    () = tokio::time::sleep_until(looked + IDLE_POLL) => break,
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(looked + MIN_GAP) => {}
            }
        }
    }

    async fn deliver(&self, event: DueEvent) {
        if !event.enabled {
            if let Err(error) = self.store.drop_event(&event.event_id).await {
                warn!(%error, "could not drop an event of a disabled webhook");
            }
            return;
        }
        let started = Instant::now();
        let (status, error) = match self.send(&event).await {
            Ok(status) => (Some(status), None),
            Err(error) => (None, Some(error)),
        };
        let delivered = status.is_some_and(|s| (200..300).contains(&s));
        let gone = status == Some(410);
        let attempt = usize::try_from(event.attempts).unwrap_or(usize::MAX);
        let next_attempt_at = match self.schedule.get(attempt) {
            Some(delay) if !delivered && !gone => Some(now_ms() + duration_ms(jittered(*delay))),
            _ => None,
        };
        let took = started.elapsed();
        record_delivery(delivered, gone, next_attempt_at.is_some(), took);
        let record = DeliveryRecord {
            response_status: status,
            error,
            duration_ms: duration_ms(took),
            next_attempt_at,
            delivered,
            gone,
        };
        // If this fails the lease lapses and the event is sent again: at
        // least once, with the same webhook-id for the receiver to dedupe.
        if let Err(error) = self.store.record_delivery(&event, &record).await {
            warn!(%error, event_id = event.event_id, "could not record a delivery");
        }
    }

    /// One signed POST; the status, or why there was none. The status
    /// alone acknowledges: the body is read to `ANSWER_LIMIT` and ignored.
    async fn send(&self, event: &DueEvent) -> Result<u16, String> {
        let answer = signed_post(SignedPost {
            url: &event.url,
            secret: &event.secret,
            id: &event.event_id,
            idempotency_key: None,
            body: event.body.clone(),
            allow_private: self.allow_private,
            timeout: self.timeout,
            user_agent: concat!("Receipt-Webhooks/", env!("CARGO_PKG_VERSION")),
            // The write that made the event: its deliveries join that trace.
            parent: event.traceparent.as_deref(),
        })
        .await?;
        Ok(answer.status)
    }
}

/// Every outcome [`record_delivery`] counts.
pub(crate) const DELIVERY_OUTCOMES: [&str; 4] = ["delivered", "retry", "gone", "exhausted"];

/// Counts a delivery attempt by its outcome, from a fixed set whatever a
/// receiver answers, and times it.
fn record_delivery(delivered: bool, gone: bool, retried: bool, took: Duration) {
    let outcome = if delivered {
        "delivered"
    } else if gone {
        "gone"
    } else if retried {
        "retry"
    } else {
        "exhausted"
    };
    metrics::counter!("receipt_webhook_deliveries_total", "outcome" => outcome).increment(1);
    metrics::histogram!("receipt_webhook_delivery_seconds").record(took.as_secs_f64());
}

/// ±10% around the scheduled delay, so retries of many events spread out.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(rand::rng().random_range(0.9..1.1))
}
