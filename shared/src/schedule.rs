//! Recurring schedules: a cron expression read in an IANA time zone, the
//! policy for fires missed while nothing ran, and the params template whose
//! `{"$fire": "..."}` values are filled in from each fire's time.
//!
//! Daylight-saving changes follow the cron rules every Unix user knows
//! (croner implements them): a fixed time that a zone skips (02:30 on the
//! night the clocks go forward) fires once, at the first minute after the
//! gap; a fixed time that a zone repeats (01:30 on the night they go back)
//! fires once, at its first occurrence. Patterns with a wildcard or a step
//! in the hour (`*/15 * * * *`) follow the clock as it runs.

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use serde_json::{Map, Value};

use crate::{calendar::Date, ledger::FieldError};

/// The longest a cron expression or a time zone's name may be.
const MAX_TEXT: usize = 200;

/// A parsed cron expression and the zone it is read in.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
    zone: Tz,
}

impl CronSchedule {
    /// Five fields (minute, hour, day of month, month, day of week; names
    /// such as `MON` and `JAN`, and `@daily` and its kin, allowed) read in
    /// `timezone`, an IANA name such as `Asia/Kolkata`. Errors name the
    /// field, `cron` or `timezone`.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let zone = if timezone.len() > MAX_TEXT {
            None
        } else {
            timezone.parse::<Tz>().ok()
        };
        if zone.is_none() {
            errors.push(FieldError::new(
                "timezone",
                "must be an IANA time zone name, such as Asia/Kolkata or UTC",
            ));
        }
        let parsed = if cron.len() > MAX_TEXT || cron.trim() != cron {
            None
        } else {
            CronParser::builder()
                .seconds(Seconds::Disallowed)
                .year(Year::Disallowed)
                .build()
                .parse(cron)
                .ok()
        };
        if parsed.is_none() {
            errors.push(FieldError::new(
                "cron",
                "must be a cron expression of five fields (minute hour day-of-month month \
                 day-of-week), such as \"0 6 1 * *\"",
            ));
        }
        match (parsed, zone) {
            (Some(cron), Some(zone)) => {
                let schedule = CronSchedule { cron, zone };
                // A pattern that matches no real day (30 February) is no schedule.
                if schedule.next_after(crate::time::now_ms()).is_none() {
                    return Err(vec![FieldError::new(
                        "cron",
                        "never fires: no date matches it",
                    )]);
                }
                Ok(schedule)
            }
            _ => Err(errors),
        }
    }

    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first fire strictly after `after_ms` (unix ms), as unix ms;
    /// `None` when the pattern fires no more.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        // Fires are whole minutes; croner keeps the start's fraction of a
        // second, so the search starts from the whole second.
        let after = self
            .zone
            .timestamp_millis_opt(whole_second(after_ms))
            .single()?;
        self.cron
            .find_next_occurrence(&after, false)
            .ok()
            .map(|fire| fire.timestamp_millis())
    }

    /// The latest fire at or before `at_ms`, not before `not_before_ms`.
    pub fn latest_at_or_before(&self, at_ms: i64, not_before_ms: i64) -> Option<i64> {
        let at = self
            .zone
            .timestamp_millis_opt(whole_second(at_ms))
            .single()?;
        self.cron
            .find_previous_occurrence(&at, true)
            .ok()
            .map(|fire| fire.timestamp_millis())
            .filter(|fire| *fire >= not_before_ms)
    }

    /// Up to `count` fires after `after_ms`, none after `until_ms`.
    pub fn upcoming(&self, after_ms: i64, until_ms: Option<i64>, count: usize) -> Vec<i64> {
        let mut fires = Vec::with_capacity(count);
        let mut from = after_ms;
        while fires.len() < count {
            match self.next_after(from) {
                Some(fire) if until_ms.is_none_or(|until| fire <= until) => {
                    fires.push(fire);
                    from = fire;
                }
                _ => break,
            }
        }
        fires
    }
}

fn whole_second(ms: i64) -> i64 {
    ms.div_euclid(1000) * 1000
}

/// What happens to fires missed while no process could fire them (every
/// worker was down). A paused schedule misses nothing: it goes on from
/// its first fire after it is resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfire {
    /// Missed fires make no job; the schedule goes on from its next fire.
    Skip,
    /// The latest missed fire makes one job; the earlier ones none.
    RunOnce,
}

impl Misfire {
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::RunOnce => "run_once",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "skip" => Some(Misfire::Skip),
            "run_once" => Some(Misfire::RunOnce),
            _ => None,
        }
    }
}

/// What a scheduler does with a schedule whose next fire is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireDecision {
    /// The fire to make a job for, if any.
    pub fire_at: Option<i64>,
    /// The schedule's next fire after this one, if it has one.
    pub next_fire_at: Option<i64>,
}

/// How late a fire may be and still count as on time: later than this,
/// it was missed and the schedule's [`Misfire`] policy decides.
pub const MISFIRE_AFTER_MS: i64 = 60_000;

impl CronSchedule {
    /// What to do at `now` with the due fire `due` (unix ms), given the
    /// policy for missed fires and the schedule's end. A fire at most
    /// [`MISFIRE_AFTER_MS`] late is on time and makes its job; a later one
    /// was missed, and with it every fire up to now: `Skip` makes no job,
    /// `RunOnce` one for the latest of them. Either way the schedule goes
    /// on from its first fire after now, so downtime never makes a burst.
    pub fn decide(
        &self,
        due: i64,
        now: i64,
        misfire: Misfire,
        ends_at: Option<i64>,
    ) -> FireDecision {
        let within_end = |fire: i64| ends_at.is_none_or(|end| fire <= end);
        if now - due <= MISFIRE_AFTER_MS {
            let next = self.next_after(due).filter(|next| within_end(*next));
            return FireDecision {
                fire_at: within_end(due).then_some(due),
                next_fire_at: next,
            };
        }
        let fire_at = match misfire {
            Misfire::Skip => None,
            Misfire::RunOnce => self
                .latest_at_or_before(now, due)
                .filter(|fire| within_end(*fire)),
        };
        FireDecision {
            fire_at,
            next_fire_at: self.next_after(now).filter(|next| within_end(*next)),
        }
    }
}

/// The values a template can take from a fire (`{"$fire": "<name>"}`),
/// each read in the schedule's zone.
pub const FIRE_VALUES: [&str; 5] = ["date", "previous_date", "month", "previous_month", "time"];

/// Checks a params template: every object whose key starts with `$` is
/// exactly `{"$fire": "<one of FIRE_VALUES>"}`. Errors name the member,
/// from `params`.
pub fn check_template(template: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(template, "params", &mut errors);
    errors
}

fn walk(value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Object(map) => {
            if map.keys().any(|key| key.starts_with('$')) {
                if let Err(message) = fire_value(map) {
                    errors.push(FieldError::new(path, message));
                }
                return;
            }
            for (key, member) in map {
                walk(member, &format!("{path}.{key}"), errors);
            }
        }
        Value::Array(items) => {
            for (n, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{n}]"), errors);
            }
        }
        _ => {}
    }
}

/// The name in `{"$fire": "<name>"}`, checked.
fn fire_value(map: &Map<String, Value>) -> Result<&str, String> {
    let refused = || {
        format!(
            "a value taken from the fire is written {{\"$fire\": \"<name>\"}}, the name one of {}",
            FIRE_VALUES.join(", ")
        )
    };
    if map.len() != 1 {
        return Err(refused());
    }
    match map.get("$fire") {
        Some(Value::String(name)) if FIRE_VALUES.contains(&name.as_str()) => Ok(name),
        _ => Err(refused()),
    }
}

/// The params a fire at `fire_ms` gives: the template with each
/// `{"$fire": ...}` replaced. The template must have passed
/// [`check_template`]; a value it cannot fill is left as it is, for the
/// kind's own check to refuse.
pub fn render(template: &Value, fire_ms: i64, zone: Tz) -> Value {
    let Some(fire) = zone.timestamp_millis_opt(fire_ms).single() else {
        return template.clone();
    };
    render_at(template, &fire)
}

fn render_at(value: &Value, fire: &DateTime<Tz>) -> Value {
    match value {
        Value::Object(map) => {
            if let Ok(name) = fire_value(map) {
                return Value::String(fire_text(name, fire));
            }
            Value::Object(
                map.iter()
                    .map(|(key, member)| (key.clone(), render_at(member, fire)))
                    .collect(),
            )
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|item| render_at(item, fire)).collect())
        }
        other => other.clone(),
    }
}

fn fire_text(name: &str, fire: &DateTime<Tz>) -> String {
    let day = fire.date_naive();
    let text_of = |day: NaiveDate| {
        Date::from_naive(day)
            .map(|d| d.to_string())
            .unwrap_or_default()
    };
    match name {
        "date" => text_of(day),
        "previous_date" => day
            .checked_sub_days(Days::new(1))
            .map(text_of)
            .unwrap_or_default(),
        "month" => text_of(day).get(..7).unwrap_or_default().to_owned(),
        "previous_month" => day
            .with_day(1)
            .and_then(|first| first.checked_sub_months(Months::new(1)))
            .map(text_of)
            .and_then(|text| text.get(..7).map(str::to_owned))
            .unwrap_or_default(),
        _ => crate::time::to_rfc3339(fire.with_timezone(&Utc).timestamp_millis()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ms(zone: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        zone.with_ymd_and_hms(y, mo, d, h, mi, 0)
            .earliest()
            .expect("a time")
            .timestamp_millis()
    }

    fn local(zone: Tz, fire: i64) -> String {
        zone.timestamp_millis_opt(fire)
            .single()
            .expect("a time")
            .format("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    fn fires_between(schedule: &CronSchedule, from: i64, count: usize) -> Vec<String> {
        schedule
            .upcoming(from, None, count)
            .into_iter()
            .map(|fire| local(schedule.zone(), fire))
            .collect()
    }

    #[test]
    fn a_daily_time_the_zone_skips_fires_once_that_day() {
        let zone: Tz = "America/New_York".parse().unwrap();
        let schedule = CronSchedule::parse("30 2 * * *", "America/New_York").unwrap();
        // Clocks go from 02:00 to 03:00 on 14 March 2027.
        let fires = fires_between(&schedule, ms(zone, 2027, 3, 13, 0, 0), 3);
        assert_eq!(
            fires,
            [
                "2027-03-13 02:30 EST",
                "2027-03-14 03:00 EDT",
                "2027-03-15 02:30 EDT"
            ]
        );
    }

    #[test]
    fn a_daily_time_the_zone_repeats_fires_once_that_day() {
        let zone: Tz = "America/New_York".parse().unwrap();
        let schedule = CronSchedule::parse("30 1 * * *", "America/New_York").unwrap();
        // Clocks go from 02:00 back to 01:00 on 1 November 2026.
        let fires = fires_between(&schedule, ms(zone, 2026, 10, 31, 12, 0), 3);
        assert_eq!(
            fires,
            [
                "2026-11-01 01:30 EDT",
                "2026-11-02 01:30 EST",
                "2026-11-03 01:30 EST"
            ]
        );
    }

    #[test]
    fn a_monthly_report_at_six_in_kolkata_is_half_past_midnight_utc() {
        let schedule = CronSchedule::parse("0 6 1 * *", "Asia/Kolkata").unwrap();
        let fires = schedule.upcoming(ms(chrono_tz::UTC, 2026, 12, 2, 0, 0), None, 2);
        assert_eq!(
            fires
                .iter()
                .map(|fire| crate::time::to_rfc3339(*fire))
                .collect::<Vec<_>>(),
            ["2027-01-01T00:30:00.000Z", "2027-02-01T00:30:00.000Z"]
        );
        let params = render(
            &json!({"month": {"$fire": "previous_month"}, "day": {"$fire": "previous_date"}}),
            fires[0],
            schedule.zone(),
        );
        assert_eq!(params, json!({"month": "2026-12", "day": "2026-12-31"}));
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_by_field() {
        for cron in [
            "",
            "* * * *",
            "0 * * * * *",
            "61 * * * *",
            " 0 6 * * *",
            "0 6 30 2 *",
            "every day",
        ] {
            let errors = CronSchedule::parse(cron, "UTC").unwrap_err();
            assert_eq!(errors[0].field, "cron", "{cron:?}");
        }
        for zone in ["", "IST", "Asia/Nowhere", "+05:30", "utc "] {
            let errors = CronSchedule::parse("0 6 * * *", zone).unwrap_err();
            assert_eq!(errors[0].field, "timezone", "{zone:?}");
        }
    }

    #[test]
    fn missed_fires_make_at_most_one_job() {
        let schedule = CronSchedule::parse("* * * * *", "UTC").unwrap();
        let due = ms(chrono_tz::UTC, 2026, 12, 2, 10, 0);
        let now = due + 3 * 3_600_000 + 20_000;
        let run_once = schedule.decide(due, now, Misfire::RunOnce, None);
        assert_eq!(
            run_once.fire_at,
            Some(due + 3 * 3_600_000),
            "the latest missed fire"
        );
        assert_eq!(run_once.next_fire_at, Some(due + 3 * 3_600_000 + 60_000));
        let skip = schedule.decide(due, now, Misfire::Skip, None);
        assert_eq!(skip.fire_at, None);
        assert_eq!(skip.next_fire_at, run_once.next_fire_at);
        assert!(
            schedule
                .upcoming(due + 12_345, None, 3)
                .iter()
                .all(|fire| fire % 60_000 == 0),
            "fires are whole minutes"
        );
        let on_time = schedule.decide(due, due + 1_500, Misfire::Skip, None);
        assert_eq!(on_time.fire_at, Some(due));
        assert_eq!(on_time.next_fire_at, Some(due + 60_000));
        let ended = schedule.decide(due, due + 1_500, Misfire::Skip, Some(due + 30_000));
        assert_eq!((ended.fire_at, ended.next_fire_at), (Some(due), None));
    }

    #[test]
    fn templates_take_only_known_fire_values() {
        assert!(check_template(&json!({"month": {"$fire": "previous_month"}, "ms": 5})).is_empty());
        for (template, field) in [
            (json!({"month": {"$fire": "last_month"}}), "params.month"),
            (json!({"month": {"$fire": "month", "x": 1}}), "params.month"),
            (json!({"a": [1, {"$when": "date"}]}), "params.a[1]"),
            (json!({"$fire": 5}), "params"),
        ] {
            let errors = check_template(&template);
            assert_eq!(errors.len(), 1, "{template}");
            assert_eq!(errors[0].field, field, "{template}");
        }
    }
}
