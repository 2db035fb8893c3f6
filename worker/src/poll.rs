//! The poll strategy of the worker pool's apalis workers on the SQL
//! storages (`docs/design.md`, apalis 1.0, item 3).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use apalis::prelude::{PollSnapshot, PollStrategy};

/// How often an idle worker of apalis's SQL storages looks for new messages
/// (apalis otherwise waits for its heartbeat, seconds).
pub const POLL: Duration = Duration::from_millis(20);
/// Wakes an idle worker every [`POLL`]. apalis's own `poll_with_interval`
/// re-arms its timer without polling it, so when a fetch completes at once
/// nothing wakes the worker again until its next heartbeat (seconds of
/// pickup latency); this strategy registers the next tick before it reports
/// this one. It also wakes at once on a publish by this process's relay,
/// instead of at the next tick.
pub struct PollEvery {
    every: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    published: Arc<tokio::sync::Notify>,
    woken: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// A publish seen while registering for the next one: reported on the
    /// next call (a finished future must never be polled again).
    wake_pending: bool,
}

impl std::fmt::Debug for PollEvery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollEvery")
            .field("every", &self.every)
            .finish()
    }
}

impl PollEvery {
    pub fn new(every: Duration, published: Arc<tokio::sync::Notify>) -> Self {
        Self {
            every,
            timer: None,
            published,
            woken: None,
            wake_pending: false,
        }
    }
}

impl Clone for PollEvery {
    fn clone(&self) -> Self {
        Self::new(self.every, self.published.clone())
    }
}

impl PollStrategy for PollEvery {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        if std::mem::take(&mut self.wake_pending) {
            return Poll::Ready(Some(()));
        }
        let published = self.published.clone();
        let woken = self
            .woken
            .get_or_insert_with(|| Box::pin(async move { published.notified().await }));
        if woken.as_mut().poll(cx).is_ready() {
            let published = self.published.clone();
            let mut next: Pin<Box<dyn Future<Output = ()> + Send + Sync>> =
                Box::pin(async move { published.notified().await });
            // Register for the next publish before reporting this one; if
            // that one is already here, report it next time.
            if next.as_mut().poll(cx).is_ready() {
                self.woken = None;
                self.wake_pending = true;
            } else {
                self.woken = Some(next);
            }
            return Poll::Ready(Some(()));
        }
        let every = self.every;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        timer.as_mut().reset(tokio::time::Instant::now() + every);
        // Polling the re-armed timer is what schedules the next wake-up.
        let _ = timer.as_mut().poll(cx);
        Poll::Ready(Some(()))
    }
}
