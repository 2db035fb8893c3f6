//! Times are stored as unix milliseconds (one integer type that both
//! databases and sqlx's `Any` driver agree on) and shown as RFC 3339 UTC.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
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
