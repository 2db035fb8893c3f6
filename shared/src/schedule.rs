//! Recurring schedules: a cron expression read in an IANA time zone, the
//! policy for fires missed while nothing ran, and the params template whose
//! `{"$fire": "..."}` values are filled in from each fire's time.
//!
//! Daylight-saving changes follow the cron rules every Unix user knows: a
//! fixed time (one minute, one hour) that a zone skips (02:30 on the night
//! the clocks go forward) fires once, at the first minute after the gap; a
//! fixed time that a zone repeats (01:30 on the night they go back) fires
//! once, at its first pass. Any other pattern (`30 * * * *`, `*/15 1 * * *`)
//! follows the clock as it runs: at both passes of a repeated hour, never
//! in a skipped one. Croner finds the fires, except within three hours of a
//! change of offset, where it misses a repeated hour's second pass and its
//! backward search can answer a time that is no whole minute; there the
//! minutes are read one by one.

use chrono::Offset;
use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use croner::{
    Cron, JobType,
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
        let mut from = after_ms;
        loop {
            // Croner finds a fire whenever there is one: it misses only a
            // second pass of an hour the zone repeats.
            let found = self.croner_next(from)?;
            let until = found.max(from) + 1;
            let Some((start, end)) = self.transition_window(from, until, Direction::Forward) else {
                return Some(found).filter(|fire| *fire > after_ms);
            };
            // Only fires that croner found before the window are its to
            // decide; around a change of offset the minutes decide.
            if found > from && found < start {
                return Some(found);
            }
            let first = next_minute(from.max(start - MINUTE_MS));
            if let Some(fire) = (0..)
                .map(|n| first + n * MINUTE_MS)
                .take_while(|minute| *minute <= end)
                .find(|minute| self.fires_at(*minute))
            {
                return Some(fire);
            }
            from = end;
        }
    }

    /// The latest fire at or before `at_ms`, not before `not_before_ms`.
    pub fn latest_at_or_before(&self, at_ms: i64, not_before_ms: i64) -> Option<i64> {
        let mut to = at_ms;
        loop {
            let found = self.croner_previous(to)?;
            let since = found.min(to) - 1;
            let fire = match self.transition_window(since, to, Direction::Backward) {
                None => Some(found),
                Some((start, end)) => match Some(found).filter(|fire| *fire <= to && *fire > end) {
                    Some(fire) => Some(fire),
                    None => {
                        let last = whole_minute_at_or_before(to.min(end));
                        let scanned = (0..)
                            .map(|n| last - n * MINUTE_MS)
                            .take_while(|minute| *minute >= start && *minute >= not_before_ms)
                            .find(|minute| self.fires_at(*minute));
                        if scanned.is_none() && start > not_before_ms {
                            to = start - 1;
                            continue;
                        }
                        scanned
                    }
                },
            };
            return fire.filter(|fire| *fire >= not_before_ms && *fire <= at_ms);
        }
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

    fn croner_next(&self, after_ms: i64) -> Option<i64> {
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

    fn croner_previous(&self, at_ms: i64) -> Option<i64> {
        let at = self
            .zone
            .timestamp_millis_opt(whole_second(at_ms))
            .single()?;
        self.cron
            .find_previous_occurrence(&at, true)
            .ok()
            .map(|fire| fire.timestamp_millis())
    }

    /// The first (forward) or last (backward) stretch around a change of
    /// the zone's offset near `[from, to]`: from three hours before the
    /// change to three hours after it, more than any zone's change.
    fn transition_window(&self, from: i64, to: i64, direction: Direction) -> Option<(i64, i64)> {
        let steps = (to - from + 2 * WINDOW_MS).div_euclid(STEP_MS) + 1;
        let step_at = |n: i64| match direction {
            Direction::Forward => from - WINDOW_MS + n * STEP_MS,
            Direction::Backward => to + WINDOW_MS - (n + 1) * STEP_MS,
        };
        let (mut before, mut after) = (0..steps)
            .map(step_at)
            .map(|at| (at, at + STEP_MS))
            .find(|(at, then)| self.offset_at(*at) != self.offset_at(*then))?;
        // The change to the minute: offsets change on whole minutes.
        let offset = self.offset_at(before);
        while after - before > MINUTE_MS {
            let middle = whole_minute_at_or_before(before + (after - before) / 2);
            if middle <= before {
                break;
            }
            if self.offset_at(middle) == offset {
                before = middle;
            } else {
                after = middle;
            }
        }
        Some((after - WINDOW_MS, after + WINDOW_MS))
    }

    fn offset_at(&self, ms: i64) -> Option<i32> {
        self.zone
            .timestamp_millis_opt(ms)
            .single()
            .map(|time| time.offset().fix().local_minus_utc())
    }

    /// Whether the schedule fires at the whole minute `minute_ms`, by the
    /// rules of the module's head: a fixed time fires at its first pass
    /// only, and, when the zone skips it, at the first minute after the
    /// gap; any other pattern fires whenever the clock shows a time it
    /// matches.
    fn fires_at(&self, minute_ms: i64) -> bool {
        let Some(local) = self.zone.timestamp_millis_opt(minute_ms).single() else {
            return false;
        };
        let fixed = self.cron.determine_job_type() == JobType::FixedTime;
        if self.cron.is_time_matching(&local).unwrap_or(false) {
            let first_pass = self
                .zone
                .from_local_datetime(&local.naive_local())
                .earliest()
                .is_some_and(|first| first == local);
            return first_pass || !fixed;
        }
        // A fixed time the zone skipped just now fires here.
        let (Some(before), Some(now)) = (
            self.offset_at(minute_ms - MINUTE_MS),
            self.offset_at(minute_ms),
        ) else {
            return false;
        };
        if !fixed || now <= before {
            return false;
        }
        let skipped = i64::from(now - before) / 60;
        (1..skipped + 1).any(|back| {
            let naive = local.naive_local() - chrono::Duration::minutes(back);
            // The skipped wall-clock time, its fields read as they are.
            self.cron
                .is_time_matching(&naive.and_utc())
                .unwrap_or(false)
        })
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Forward,
    Backward,
}

const MINUTE_MS: i64 = 60_000;
/// How far around a change of offset the minutes are read one by one.
const WINDOW_MS: i64 = 3 * 3_600_000;
/// The step of the search for a change of offset: no zone changes twice
/// within it.
const STEP_MS: i64 = 6 * 3_600_000;

fn next_minute(after_ms: i64) -> i64 {
    (after_ms.div_euclid(MINUTE_MS) + 1) * MINUTE_MS
}

fn whole_minute_at_or_before(ms: i64) -> i64 {
    ms.div_euclid(MINUTE_MS) * MINUTE_MS
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

    fn utc(text: &str) -> i64 {
        crate::time::parse_rfc3339(text).expect("an RFC 3339 time")
    }

    /// Every fire of `cron` in New York on a night the clocks change, as
    /// UTC times listed in order: from any time between the first and the
    /// last, the next fire is the first listed after it, and the latest
    /// fire at or before it is the last listed not after it.
    fn assert_fires_over_the_night(cron: &str, fires: &[&str]) {
        let schedule = CronSchedule::parse(cron, "America/New_York").unwrap();
        let fires: Vec<i64> = fires.iter().map(|fire| utc(fire)).collect();
        let (first, last) = (fires[0], fires[fires.len() - 1]);
        let shown = |fire: Option<i64>| fire.map(crate::time::to_rfc3339);
        // Every 7.5 minutes, and at each fire and a second either side.
        let mut times: Vec<i64> = (0..)
            .map(|n| first + n * 450_000)
            .take_while(|at| *at < last)
            .collect();
        times.extend(
            fires
                .iter()
                .flat_map(|fire| [fire - 1_000, *fire, fire + 1_000]),
        );
        times.retain(|at| *at >= first && *at < last);
        for at in times {
            let next = fires.iter().copied().find(|fire| *fire > at);
            assert_eq!(
                shown(schedule.next_after(at)),
                shown(next),
                "{cron}: the next fire after {}",
                crate::time::to_rfc3339(at)
            );
            let latest = fires.iter().copied().rev().find(|fire| *fire <= at);
            assert_eq!(
                shown(schedule.latest_at_or_before(at, first)),
                shown(latest),
                "{cron}: the latest fire at or before {}",
                crate::time::to_rfc3339(at)
            );
        }
    }

    #[test]
    fn on_the_night_the_clocks_go_back_a_pattern_with_a_wildcard_hour_fires_at_both_passes() {
        // 7 November 2027: 02:00 EDT (06:00Z) becomes 01:00 EST, so the
        // clock shows 01:00 to 01:59 from 05:00Z and again from 06:00Z.
        assert_fires_over_the_night(
            "30 * * * *",
            &[
                "2027-11-07T04:30:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-07T06:30:00Z",
                "2027-11-07T07:30:00Z",
                "2027-11-07T08:30:00Z",
            ],
        );
        assert_fires_over_the_night(
            "*/20 * * * *",
            &[
                "2027-11-07T04:40:00Z",
                "2027-11-07T05:00:00Z",
                "2027-11-07T05:20:00Z",
                "2027-11-07T05:40:00Z",
                "2027-11-07T06:00:00Z",
                "2027-11-07T06:20:00Z",
                "2027-11-07T06:40:00Z",
                "2027-11-07T07:00:00Z",
                "2027-11-07T07:20:00Z",
            ],
        );
        // A step in the hour: 00:00 EDT, then 02:00 and 04:00 EST; the
        // clock shows no even hour twice.
        assert_fires_over_the_night(
            "0 */2 * * *",
            &[
                "2027-11-07T02:00:00Z",
                "2027-11-07T04:00:00Z",
                "2027-11-07T07:00:00Z",
                "2027-11-07T09:00:00Z",
            ],
        );
        // Every minute of 01:xx, at both passes.
        assert_fires_over_the_night(
            "*/30 1 * * *",
            &[
                "2027-11-06T05:00:00Z",
                "2027-11-06T05:30:00Z",
                "2027-11-07T05:00:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-07T06:00:00Z",
                "2027-11-07T06:30:00Z",
                "2027-11-08T06:00:00Z",
            ],
        );
        // A fixed time fires once, at its first pass.
        assert_fires_over_the_night(
            "30 1 * * *",
            &[
                "2027-11-06T05:30:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-08T06:30:00Z",
            ],
        );
    }

    #[test]
    fn on_the_night_the_clocks_go_forward_a_wildcard_hour_follows_the_clock_and_a_fixed_time_fires_after_the_gap()
     {
        // 14 March 2027: 02:00 EST (07:00Z) becomes 03:00 EDT; the clock
        // never shows 02:xx.
        assert_fires_over_the_night(
            "30 * * * *",
            &[
                "2027-03-14T05:30:00Z",
                "2027-03-14T06:30:00Z",
                "2027-03-14T07:30:00Z",
                "2027-03-14T08:30:00Z",
            ],
        );
        assert_fires_over_the_night(
            "*/20 * * * *",
            &[
                "2027-03-14T06:20:00Z",
                "2027-03-14T06:40:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-14T07:20:00Z",
            ],
        );
        assert_fires_over_the_night(
            "0 */2 * * *",
            &[
                "2027-03-14T03:00:00Z",
                "2027-03-14T05:00:00Z",
                "2027-03-14T08:00:00Z",
                "2027-03-14T10:00:00Z",
            ],
        );
        assert_fires_over_the_night(
            "30 2 * * *",
            &[
                "2027-03-13T07:30:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-15T06:30:00Z",
            ],
        );
        assert_fires_over_the_night(
            "0 2 * * *",
            &[
                "2027-03-13T07:00:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-15T06:00:00Z",
            ],
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
