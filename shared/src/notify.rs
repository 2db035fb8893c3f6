//! In-process signals: "this job reached a final status" (wakes long polls,
//! and the webhook dispatcher if the end wrote events), "webhook events
//! are due" and "the outbox has new rows" (wakes the relay). Across processes the
//! store adds Postgres NOTIFY; everything also re-checks on a timer.

use std::sync::Arc;

use tokio::sync::{Notify, broadcast};

#[derive(Clone)]
pub struct Signals {
    finished: broadcast::Sender<String>,
    outbox: Arc<Notify>,
    finishes: Arc<Notify>,
    events: Arc<Notify>,
    published: Arc<Notify>,
}

impl Default for Signals {
    fn default() -> Self {
        let (finished, _) = broadcast::channel(1024);
        Self {
            finished,
            outbox: Arc::new(Notify::new()),
            finishes: Arc::new(Notify::new()),
            events: Arc::new(Notify::new()),
            published: Arc::new(Notify::new()),
        }
    }
}

impl Signals {
    /// A job reached a final status in this process; its webhook events
    /// may be waiting (the dispatcher tells by the store's count of
    /// commits that wrote events).
    pub fn job_finished(&self, job_id: &str) {
        let _ = self.finished.send(job_id.to_owned());
        self.finishes.notify_one();
    }

    pub async fn finishes_wait(&self) {
        self.finishes.notified().await;
    }

    /// This process's relay put messages in the queue: its workers may
    /// fetch now instead of at their next poll.
    pub fn published(&self) {
        self.published.notify_one();
    }

    pub fn published_notify(&self) -> Arc<Notify> {
        self.published.clone()
    }

    /// Webhook events may be due: the dispatcher looks whatever the
    /// store's count says (events written by another process, a webhook
    /// registered for a finished job).
    pub fn events_changed(&self) {
        self.events.notify_one();
    }

    pub async fn events_wait(&self) {
        self.events.notified().await;
    }

    pub fn subscribe_finished(&self) -> broadcast::Receiver<String> {
        self.finished.subscribe()
    }

    pub fn outbox_changed(&self) {
        self.outbox.notify_one();
    }

    pub async fn outbox_wait(&self) {
        self.outbox.notified().await;
    }
}
