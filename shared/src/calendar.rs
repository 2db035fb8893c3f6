//! The one reader of dates and months: `YYYY-MM-DD` and `YYYY-MM`, ASCII
//! digits only, a four-digit year, two-digit month and day, and a real
//! calendar date. Nothing else is read as a date anywhere: on SQLite the
//! ledger stores dates as text and selects months and ranges by text
//! order, which is date order only for text written exactly so; on
//! Postgres a date is a `date`, converted to and from [`Date`] here.
//!
//! These types have no `Deserialize`: a request's date is decoded as a
//! string and checked after, so that a bad date is a 422 naming its field
//! rather than a 400 for the whole body.

use std::fmt;

use chrono::{Datelike, NaiveDate};

/// A calendar date, written `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(NaiveDate);

/// A month, written `YYYY-MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    month: u32,
}

/// The value of `digits`, if every byte is an ASCII digit.
fn number(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })
}

/// Year and month of text that starts `YYYY-MM` (checked strictly).
fn year_month(bytes: &[u8]) -> Option<(i32, u32)> {
    if bytes.len() < 7 || bytes[4] != b'-' {
        return None;
    }
    let year = i32::try_from(number(&bytes[..4])?).ok()?;
    let month = number(&bytes[5..7])?;
    (1..=12).contains(&month).then_some((year, month))
}

impl Date {
    /// `text` if it is exactly a calendar date written `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Option<Date> {
        let bytes = text.as_bytes();
        if bytes.len() != 10 || bytes[7] != b'-' {
            return None;
        }
        let (year, month) = year_month(bytes)?;
        let day = number(&bytes[8..])?;
        NaiveDate::from_ymd_opt(year, month, day).map(Date)
    }

    pub fn month(self) -> Month {
        Month {
            year: self.0.year(),
            month: self.0.month(),
        }
    }

    /// The day as chrono's date, for a database's `date` column.
    pub fn naive(self) -> NaiveDate {
        self.0
    }

    /// A day read from a database's `date` column, if its year has four
    /// digits: only such a day is written `YYYY-MM-DD`.
    pub fn from_naive(day: NaiveDate) -> Option<Date> {
        (0..=9999).contains(&day.year()).then_some(Date(day))
    }
}

impl Month {
    /// `text` if it is exactly a month written `YYYY-MM`.
    pub fn parse(text: &str) -> Option<Month> {
        let bytes = text.as_bytes();
        if bytes.len() != 7 {
            return None;
        }
        let (year, month) = year_month(bytes)?;
        Some(Month { year, month })
    }

    /// The month's first day.
    pub fn first_day(self) -> Date {
        // Any four-digit year and month 1 to 12 is a date chrono holds.
        Date(NaiveDate::from_ymd_opt(self.year, self.month, 1).unwrap_or(NaiveDate::MIN))
    }

    /// The month's last day.
    pub fn last_day(self) -> Date {
        let first = self.first_day().0;
        let next = first
            .checked_add_months(chrono::Months::new(1))
            .unwrap_or(NaiveDate::MAX);
        Date(next.pred_opt().unwrap_or(first))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.0.year(),
            self.0.month(),
            self.0.day()
        )
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts that look like dates and are not, as clients have sent them.
    const NOT_DATES: [&str; 24] = [
        "2026- 1-25",
        " 2026-01-25",
        "2026-01-25 ",
        "+999-12-31",
        "-001-01-01",
        "+2026-01-25",
        "2026-1-25",
        "2026-01-5",
        "02026-01-25",
        "2026-01-25x",
        "2026-02-30",
        "2026-02-29",
        "2026-13-01",
        "2026-00-10",
        "2026-01-00",
        "2026-01-32",
        "2026/01/25",
        "2026-01-2\u{2007}",
        "2026-\u{3000}1-2",
        "٢٠٢٦-01-25",
        "2026-0١-25",
        "20260125",
        "",
        "2026-01-25T00:00:00",
    ];

    const NOT_MONTHS: [&str; 12] = [
        "2026- 1",
        "2026-1",
        " 2026-01",
        "2026-01 ",
        "+999-12",
        "-001-01",
        "02026-01",
        "2026-13",
        "2026-00",
        "2026-01-01",
        "2026-\u{2007}1",
        "٢٠٢٦-01",
    ];

    #[test]
    fn only_the_canonical_forms_are_read() {
        assert_eq!(Date::parse("2024-02-29").unwrap().to_string(), "2024-02-29");
        assert_eq!(Date::parse("0001-01-01").unwrap().to_string(), "0001-01-01");
        assert_eq!(Month::parse("2026-10").unwrap().to_string(), "2026-10");
        for text in NOT_DATES {
            assert_eq!(Date::parse(text), None, "{text:?}");
        }
        for text in NOT_MONTHS {
            assert_eq!(Month::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_month_spans_its_real_days() {
        let february = Month::parse("2024-02").unwrap();
        assert_eq!(february.first_day().to_string(), "2024-02-01");
        assert_eq!(february.last_day().to_string(), "2024-02-29");
        assert_eq!(
            Month::parse("9999-12").unwrap().last_day().to_string(),
            "9999-12-31"
        );
        let date = Date::parse("2026-01-25").unwrap();
        assert_eq!(date.month(), Month::parse("2026-01").unwrap());
    }

    #[test]
    fn a_database_date_is_a_date_only_in_a_four_digit_year() {
        let date = Date::parse("0000-02-29").unwrap();
        assert_eq!(Date::from_naive(date.naive()), Some(date));
        let last = Date::parse("9999-12-31").unwrap().naive();
        assert_eq!(Date::from_naive(last.succ_opt().unwrap()), None);
        let first = Date::parse("0000-01-01").unwrap().naive();
        assert_eq!(Date::from_naive(first.pred_opt().unwrap()), None);
    }

    /// Real days from 0001-01-01 to 9999-12-31 (each of 1900 to 2100, one
    /// in 13 of the rest) are read, and print as the very text they were
    /// read from (so text order is date order for everything stored); a
    /// non-digit in place of any byte is refused.
    #[test]
    fn real_dates_are_read_and_every_one_byte_change_refused() {
        let replacements = [
            " ", "+", "-", "\u{2007}", "\u{3000}", "\u{a0}", "٢", "a", ".",
        ];
        let mut day = NaiveDate::from_ymd_opt(1, 1, 1).unwrap();
        let mut n = 0u64;
        while let Some(next) = day.succ_opt().filter(|d| d.year() <= 9999) {
            n += 1;
            if !n.is_multiple_of(13) && !(1900..=2100).contains(&day.year()) {
                day = next;
                continue;
            }
            let text = day.format("%Y-%m-%d").to_string();
            assert_eq!(
                Date::parse(&text).map(|d| d.to_string()),
                Some(text.clone())
            );
            assert_eq!(
                Month::parse(&text[..7]).map(|m| m.to_string()),
                Some(text[..7].to_owned())
            );
            // Every day's text would take minutes; a prime stride still
            // reaches every position, month and day of month.
            if n.is_multiple_of(97) {
                for at in 0..10 {
                    for with in replacements {
                        let changed = format!("{}{with}{}", &text[..at], &text[at + 1..]);
                        if changed != text {
                            assert_eq!(Date::parse(&changed), None, "{changed:?}");
                        }
                        if at < 7 {
                            let month = format!("{}{with}{}", &text[..at], &text[at + 1..7]);
                            if month != text[..7] {
                                assert_eq!(Month::parse(&month), None, "{month:?}");
                            }
                        }
                    }
                }
            }
            day = next;
        }
        assert_eq!(day.to_string(), "9999-12-31");
    }
}
