//! Times are stored as unix milliseconds (one integer type that both
//! databases and sqlx's `Any` driver agree on) and shown as RFC 3339 UTC.
//!
//! One clock: every time Receipt decides by or writes (a job's due time,
//! a lease, a backoff, a schedule's fire, a key's expiry, a retention
//! cut-off, a webhook's timestamp) is [`now_ms`], the database's clock as
//! this process reads it (`docs/design.md`, One clock). On Postgres the
//! store sets it from the database's own clock when it connects and again
//! every few seconds ([`set_from_database`]); between two readings it runs
//! on this host's monotonic clock, so a host whose wall clock is wrong, or
//! is stepped, decides nothing differently from one whose clock is right.
//! On SQLite the database's clock is this process's: [`now_ms`] is the
//! wall clock until a database sets it.

use std::{
    sync::{
        OnceLock,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, SecondsFormat, Utc};

/// [`DATABASE_OFFSET_MS`] before any database has set it.
const UNSET: i64 = i64::MIN;

/// The database's time, in unix ms, when [`anchor`] was taken: the
/// database's time now is this plus the monotonic time since the anchor.
static DATABASE_OFFSET_MS: AtomicI64 = AtomicI64::new(UNSET);

/// A moment of this process's monotonic clock that readings count from.
fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// Negative for a moment before the anchor (a reading sent before the
/// anchor was first taken).
fn ms_since_anchor(at: Instant) -> i64 {
    let anchor = anchor();
    match at.checked_duration_since(anchor) {
        Some(after) => duration_ms(after),
        None => -duration_ms(anchor.saturating_duration_since(at)),
    }
}

/// The time now, in unix ms, by the one clock (see the module's doc).
pub fn now_ms() -> i64 {
    match DATABASE_OFFSET_MS.load(Ordering::Relaxed) {
        UNSET => wall_clock_ms(),
        offset => offset + ms_since_anchor(Instant::now()),
    }
}

/// Whether a database has set [`now_ms`].
pub fn is_set() -> bool {
    DATABASE_OFFSET_MS.load(Ordering::Relaxed) != UNSET
}

/// This host's wall clock, in unix ms: for what only this host sees (how
/// far it is off the database's), never to decide by.
pub fn wall_clock_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Sets [`now_ms`] from a reading of the database's clock: `database_ms`,
/// read by a round trip sent at `sent` and answered at `answered`. The
/// reading is taken as of the round trip's end, the latest moment the
/// database can have read its clock, so that [`now_ms`] is never ahead of
/// the database's clock (a job is never started early by it), and behind
/// it by at most the round trip. Answers how far the clock moved, in ms,
/// against where this process's monotonic clock had taken it since the
/// last reading (0 for the first).
pub fn set_from_database(database_ms: i64, sent: Instant, answered: Instant) -> i64 {
    let offset = database_ms - ms_since_anchor(answered.max(sent));
    match DATABASE_OFFSET_MS.swap(offset, Ordering::Relaxed) {
        UNSET => 0,
        before => offset - before,
    }
}

pub fn to_rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An RFC 3339 time with its offset (`2026-12-03T06:00:00Z`,
/// `2026-12-03T11:30:00+05:30`) as unix ms; `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.timestamp_millis())
}

pub fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `base` for the first attempt, doubled for each one after it, up to `max`.
pub fn doubled(attempt: i64, base: Duration, max: Duration) -> Duration {
    let exponent = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    base.saturating_mul(2u32.saturating_pow(exponent)).min(max)
}

/// The retry backoff of `docs/api.md`: starts at `base`, doubles per
/// attempt up to `max`, with "equal jitter" (half fixed, half random) so
/// retries spread out.
pub fn backoff_delay(attempt: i64, base: Duration, max: Duration) -> Duration {
    use rand::Rng;
    let full = doubled(attempt, base, max);
    let half = full / 2;
    half + half.mul_f64(rand::rng().random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_counts_on_from_the_databases_reading() {
        // A reading of the database that agrees with this host (other tests
        // of this binary read the clock too), taken over a 20 ms round trip.
        let sent = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let answered = Instant::now();
        let database_ms = wall_clock_ms() - 10;
        set_from_database(database_ms, sent, answered);
        assert!(is_set());
        let now = now_ms();
        assert!(
            (database_ms..database_ms + 1_000).contains(&now),
            "the reading is counted on from the round trip's end: {} ms",
            now - database_ms
        );
        assert!(
            now < database_ms + 10,
            "the reading is taken as of the round trip's end, not before: {} ms",
            now - database_ms
        );
        std::thread::sleep(Duration::from_millis(30));
        assert!(now_ms() >= now + 30, "it runs on");
        // The same clock read again has not moved against this host's.
        let sent = Instant::now();
        let moved = set_from_database(wall_clock_ms(), sent, sent);
        assert!(moved.abs() < 50, "moved {moved} ms");
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(300);
        for attempt in 1..=12 {
            let full = Duration::from_secs(1 << (attempt - 1)).min(max);
            let delay = backoff_delay(attempt, base, max);
            assert!(
                delay >= full / 2 && delay <= full,
                "attempt {attempt}: {delay:?}"
            );
        }
    }
}
