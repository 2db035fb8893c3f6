//! Trying an operation again after a pause that doubles: the one loop
//! behind every retry inside a process (a claim or an outcome the database
//! did not take, a saga's record, the worker pool's restarts, the queue's
//! recovery at start). A job's own retries are not this: each is a new
//! attempt, scheduled in the database after a [`crate::time::backoff_delay`].

use std::{
    future::Future,
    time::{Duration, Instant},
};

use crate::time::doubled;

/// How an operation is tried again: after a pause that starts at `first`
/// and doubles after each failure up to `max`, for as long as the caller's
/// `again` says so, and optionally for at most so many tries.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    first: Duration,
    max: Duration,
    most_tries: Option<u32>,
    fresh_after: Option<Duration>,
}

impl Retry {
    /// Pauses of `first`, then twice that after each failure, up to `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            most_tries: None,
            fresh_after: None,
        }
    }

    /// At most `tries` tries in all (the first included).
    pub const fn at_most(mut self, tries: u32) -> Self {
        self.most_tries = Some(tries);
        self
    }

    /// A try that ran at least this long worked for a while: the pause
    /// after it starts again from `first`.
    pub const fn fresh_after(mut self, ran: Duration) -> Self {
        self.fresh_after = Some(ran);
        self
    }

    /// [`Retry::run_until`] with nothing that stops it but `again`.
    pub async fn run<T, E, Fut>(
        &self,
        attempt: impl FnMut(u32) -> Fut,
        again: impl FnMut(&E, u32) -> bool,
    ) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_until(std::future::pending(), attempt, again).await
    }

    /// Runs `attempt` (given the try's number, from 1) until it succeeds.
    /// After each failure `again` is asked, with the error and the try's
    /// number, whether to try again (the place to log the failure); the
    /// last error is returned when it says no, when the tries allowed are
    /// used up (then it is not asked), or when `stop` completes before or
    /// during a pause. `stop` never interrupts a try.
    pub async fn run_until<T, E, Fut>(
        &self,
        stop: impl Future<Output = ()>,
        mut attempt: impl FnMut(u32) -> Fut,
        mut again: impl FnMut(&E, u32) -> bool,
    ) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let mut stop = std::pin::pin!(stop);
        let mut pauses = Pauses::new(self);
        let mut tries = 0;
        loop {
            tries += 1;
            let started = Instant::now();
            let error = match attempt(tries).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if self.most_tries.is_some_and(|most| tries >= most) || !again(&error, tries) {
                return Err(error);
            }
            tokio::select! {
                biased;
                () = &mut stop => return Err(error),
                () = tokio::time::sleep(pauses.after(started.elapsed())) => {}
            }
        }
    }
}

/// The pauses of one run of a [`Retry`].
struct Pauses<'a> {
    retry: &'a Retry,
    /// Pauses since the first try, or since a try that ran long.
    taken: i64,
}

impl<'a> Pauses<'a> {
    fn new(retry: &'a Retry) -> Self {
        Self { retry, taken: 0 }
    }

    /// The pause after a try that ran for `ran` and failed.
    fn after(&mut self, ran: Duration) -> Duration {
        if self.retry.fresh_after.is_some_and(|long| ran >= long) {
            self.taken = 0;
        }
        self.taken += 1;
        doubled(self.taken, self.retry.first, self.retry.max)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pauses_double_up_to_the_cap_and_start_over_after_a_long_try() {
        let retry = Retry::doubling(100 * MS, 1000 * MS).fresh_after(60_000 * MS);
        let mut pauses = Pauses::new(&retry);
        let quick = Duration::ZERO;

        let first: Vec<u64> = (0..6)
            .map(|_| pauses.after(quick).as_millis() as u64)
            .collect();
        let after_a_long_try = pauses.after(60_000 * MS);
        let next = pauses.after(quick);

        assert_eq!(first, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(after_a_long_try, 100 * MS);
        assert_eq!(next, 200 * MS);
    }

    #[tokio::test]
    async fn a_failing_operation_is_tried_until_it_succeeds() {
        let tries = Cell::new(0);

        let result: Result<u32, &str> = Retry::doubling(MS, 2 * MS)
            .run(
                |n| {
                    tries.set(n);
                    async move { if n < 4 { Err("down") } else { Ok(n) } }
                },
                |_, _| true,
            )
            .await;

        assert_eq!(result, Ok(4));
        assert_eq!(tries.get(), 4);
    }

    #[tokio::test]
    async fn the_last_error_comes_back_when_the_tries_are_used_up_or_again_says_no() {
        let asked = Cell::new(0);

        let used_up: Result<(), u32> = Retry::doubling(MS, MS)
            .at_most(3)
            .run(
                |n| async move { Err(n) },
                |_, _| {
                    asked.set(asked.get() + 1);
                    true
                },
            )
            .await;
        let refused: Result<(), u32> = Retry::doubling(MS, MS)
            .run(|n| async move { Err(n) }, |error, _| *error < 2)
            .await;

        assert_eq!(used_up, Err(3));
        assert_eq!(asked.get(), 2, "not asked after the last try");
        assert_eq!(refused, Err(2));
    }

    #[tokio::test]
    async fn a_stop_ends_the_pause_and_returns_the_last_error() {
        let started = Instant::now();

        let result: Result<(), &str> =
            Retry::doubling(Duration::from_secs(3600), Duration::from_secs(3600))
                .run_until(
                    std::future::ready(()),
                    |_| async { Err("down") },
                    |_, _| true,
                )
                .await;

        assert_eq!(result, Err("down"));
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
