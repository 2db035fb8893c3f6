//! Waiting for an event with a deadline, never for a fixed time: a test
//! that waits for what it expects goes on the moment it happens, and one
//! whose event never comes fails with what it saw last.
//!
//! [`until`] looks at a condition again every [`POLL`] (a row, a status, a
//! metric); [`Record`] wakes its waiters as each item arrives (the
//! requests a test's receiver got).

use std::{
    fmt::Debug,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// How often [`until`] looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// Looks at `check` every `every` until it answers `Ok`, and returns
/// that; after `within`, returns the last `Err` (what was seen instead),
/// for a caller that says more about it than [`until_ok`] does.
pub async fn poll<T, E>(
    within: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// Looks at `check` until it answers `Ok`, and returns that; panics after
/// `within`, naming `what` and the last `Err` (what was seen instead).
pub async fn until_ok<T, E: Debug>(
    what: &str,
    within: Duration,
    check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    match poll(within, POLL, check).await {
        Ok(value) => value,
        Err(seen) => panic!("{what}: not within {within:?}; last seen: {seen:?}"),
    }
}

/// Looks at `check` until it answers `Some`, and returns that; panics
/// after `within`, naming `what`.
pub async fn until<T>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    until_ok(what, within, async || check().await.ok_or("not yet")).await
}

/// Looks at `check` until it holds; panics after `within`, naming `what`.
pub async fn until_true(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    until(what, within, async || check().await.then_some(())).await
}

/// Items recorded as they happen (the requests a receiver got), which a
/// test waits on: each [`Record::push`] wakes the waiters at once.
pub struct Record<T> {
    items: Mutex<Vec<T>>,
    pushed: Notify,
}

impl<T> Default for Record<T> {
    fn default() -> Self {
        Record {
            items: Mutex::new(Vec::new()),
            pushed: Notify::new(),
        }
    }
}

impl<T: Clone> Record<T> {
    pub fn push(&self, item: T) {
        self.lock().push(item);
        self.pushed.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything recorded so far, in order.
    pub fn all(&self) -> Vec<T> {
        self.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until `holds` is true of what is recorded, and returns it;
    /// panics after `within`, naming `what` and how many items came.
    pub async fn wait_until(
        &self,
        what: &str,
        within: Duration,
        holds: impl Fn(&[T]) -> bool,
    ) -> Vec<T> {
        let deadline = Instant::now() + within;
        loop {
            // Registered before the look, so a push in between is not missed.
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();
            {
                let items = self.lock();
                if holds(&items) {
                    return items.clone();
                }
            }
            if tokio::time::timeout_at(deadline, pushed).await.is_err() {
                panic!(
                    "{what}: not within {within:?}; {} recorded",
                    self.lock().len()
                );
            }
        }
    }

    /// Waits until at least `n` items are recorded, and returns them all.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<T> {
        self.wait_until(&format!("{n} recorded"), within, |items| items.len() >= n)
            .await
    }
}
