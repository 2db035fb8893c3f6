//! Ledger entries: money in integer paise, GST rates in hundredths of a
//! percent, and the per-entry tax rule of `docs/api.md` (rounded half up to
//! the paisa).

use serde::{Deserialize, Serialize};

use crate::calendar::{Date, Month};

/// One problem with a request's content: the `errors` list of a 422.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The largest amount one entry may carry, ₹1,000,000,000.00: a month of a
/// million such entries still sums inside a 64-bit integer of paise.
pub const MAX_AMOUNT_PAISE: i64 = 100_000_000_000;

/// Rates `docs/api.md` allows, in hundredths of a percent.
pub const GST_RATES_CENTI: [i64; 7] = [0, 25, 300, 500, 1200, 1800, 2800];

/// An entry as a client sends it. The schema is closed.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LedgerEntryInput {
    /// The client's id, 1 to 64 characters; makes the import idempotent.
    #[cfg_attr(feature = "openapi", schema(example = "inv-2026-0001"))]
    pub id: String,
    /// `YYYY-MM-DD` exactly (`crate::calendar`).
    #[cfg_attr(feature = "openapi", schema(example = "2026-10-03"))]
    pub date: String,
    /// `sale` or `purchase`.
    #[cfg_attr(feature = "openapi", schema(example = "sale"))]
    pub direction: String,
    /// A decimal string with at most two fractional digits.
    #[cfg_attr(feature = "openapi", schema(example = "1299.00"))]
    pub amount: String,
    /// One of `0`, `0.25`, `3`, `5`, `12`, `18`, `28`.
    #[cfg_attr(feature = "openapi", schema(example = "18"))]
    pub gst_rate: String,
    /// IGST at the full rate when true; CGST and SGST at half the rate each otherwise.
    #[serde(default)]
    pub interstate: bool,
    #[serde(default)]
    pub party: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Sale,
    Purchase,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Sale => "sale",
            Direction::Purchase => "purchase",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "sale" => Some(Direction::Sale),
            "purchase" => Some(Direction::Purchase),
            _ => None,
        }
    }
}

/// A validated entry, as stored; `date` is `YYYY-MM-DD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub entry_id: String,
    pub date: String,
    pub direction: Direction,
    pub amount_paise: i64,
    pub rate_centi: i64,
    pub interstate: bool,
    pub party: String,
    pub description: String,
}

/// The taxes of one entry, in paise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntryTax {
    pub igst: i64,
    pub cgst: i64,
    pub sgst: i64,
}

impl LedgerEntry {
    pub fn tax(&self) -> EntryTax {
        tax_of(self.amount_paise, self.rate_centi, self.interstate)
    }
}

/// The per-entry rule: IGST at the full rate for interstate entries, else
/// CGST and SGST at half the rate each; each rounded half up to the paisa.
/// `store::ledger` computes the same in SQL; a test keeps the two equal.
pub fn tax_of(amount_paise: i64, rate_centi: i64, interstate: bool) -> EntryTax {
    let base = amount_paise * rate_centi;
    if interstate {
        EntryTax {
            igst: (base + 5_000) / 10_000,
            ..EntryTax::default()
        }
    } else {
        let half = (base + 10_000) / 20_000;
        EntryTax {
            igst: 0,
            cgst: half,
            sgst: half,
        }
    }
}

/// Parses a non-negative decimal string with at most two fractional digits
/// into hundredths (`"1299.5"` is 129950).
pub fn parse_hundredths(text: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || whole.len() > 15
        || !digits_only(whole)
        || fraction.len() > 2
        || !digits_only(fraction)
        || (text.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fraction: i64 = format!("{fraction:0<2}").parse().ok()?;
    whole.checked_mul(100)?.checked_add(fraction)
}

/// Paise as a decimal string with two fractional digits.
pub fn format_paise(paise: i64) -> String {
    let sign = if paise < 0 { "-" } else { "" };
    let abs = paise.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// A rate in hundredths of a percent, written as `docs/api.md` lists it
/// (`0.25`, `18`).
pub fn format_rate(rate_centi: i64) -> String {
    if rate_centi % 100 == 0 {
        (rate_centi / 100).to_string()
    } else {
        let text = format_paise(rate_centi);
        text.trim_end_matches('0').to_owned()
    }
}

impl LedgerEntryInput {
    /// Checks every field; `at` is the entry's path in the request
    /// (`entries[3]`). A valid entry comes with its month.
    pub fn validate(&self, at: &str) -> Result<(LedgerEntry, Month), Vec<FieldError>> {
        let mut errors = Vec::new();
        let id_len = self.id.chars().count();
        if !(1..=64).contains(&id_len) {
            errors.push(FieldError::new(
                format!("{at}.id"),
                "must be 1 to 64 characters",
            ));
        }
        let date = Date::parse(&self.date);
        if date.is_none() {
            errors.push(FieldError::new(
                format!("{at}.date"),
                "must be a calendar date written YYYY-MM-DD",
            ));
        }
        let direction = Direction::parse(&self.direction);
        if direction.is_none() {
            errors.push(FieldError::new(
                format!("{at}.direction"),
                "must be \"sale\" or \"purchase\"",
            ));
        }
        let amount = parse_hundredths(&self.amount).filter(|a| *a <= MAX_AMOUNT_PAISE);
        if amount.is_none() {
            errors.push(FieldError::new(
                format!("{at}.amount"),
                "must be a non-negative decimal string with at most two fractional digits, at most 1000000000.00",
            ));
        }
        let rate = parse_hundredths(&self.gst_rate).filter(|r| GST_RATES_CENTI.contains(r));
        if rate.is_none() {
            errors.push(FieldError::new(
                format!("{at}.gst_rate"),
                "must be one of \"0\", \"0.25\", \"3\", \"5\", \"12\", \"18\", \"28\"",
            ));
        }
        // Postgres text cannot hold NUL; refuse it on every backend alike.
        for (field, text) in [
            ("id", &self.id),
            ("party", &self.party),
            ("description", &self.description),
        ] {
            if text.contains('\0') {
                errors.push(FieldError::new(
                    format!("{at}.{field}"),
                    "must not contain the NUL character",
                ));
            }
        }
        if self.party.chars().count() > 500 {
            errors.push(FieldError::new(
                format!("{at}.party"),
                "must be at most 500 characters",
            ));
        }
        if self.description.chars().count() > 2000 {
            errors.push(FieldError::new(
                format!("{at}.description"),
                "must be at most 2000 characters",
            ));
        }
        match (date, direction, amount, rate) {
            (Some(date), Some(direction), Some(amount_paise), Some(rate_centi))
                if errors.is_empty() =>
            {
                let entry = LedgerEntry {
                    entry_id: self.id.clone(),
                    date: date.to_string(),
                    direction,
                    amount_paise,
                    rate_centi,
                    interstate: self.interstate,
                    party: self.party.clone(),
                    description: self.description.clone(),
                };
                Ok((entry, date.month()))
            }
            _ => Err(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_exactly_or_not_at_all() {
        assert_eq!(parse_hundredths("1299.00"), Some(129_900));
        assert_eq!(parse_hundredths("1299.5"), Some(129_950));
        assert_eq!(parse_hundredths("0"), Some(0));
        assert_eq!(parse_hundredths("0.25"), Some(25));
        for bad in [
            "", "-1", "1.", ".5", "1.234", "1e3", " 1", "1,000", "+1", "0x10",
        ] {
            assert_eq!(parse_hundredths(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn half_a_paisa_rounds_up() {
        // 18% of 0.25 = 0.045 IGST -> 0.05; CGST 9% = 0.0225 -> 0.02.
        assert_eq!(tax_of(25, 1800, true).igst, 5);
        assert_eq!(tax_of(25, 1800, false).cgst, 2);
        // 5% of 0.50 = 0.025 IGST -> 0.03; 2.5% of 1.00 = 0.025 CGST -> 0.03.
        assert_eq!(tax_of(50, 500, true).igst, 3);
        assert_eq!(tax_of(100, 500, false).cgst, 3);
        assert_eq!(tax_of(100, 500, false).sgst, 3);
    }

    #[test]
    fn rates_and_money_format_as_api_md_writes_them() {
        assert_eq!(format_rate(25), "0.25");
        assert_eq!(format_rate(1800), "18");
        assert_eq!(format_rate(0), "0");
        assert_eq!(format_paise(129_900), "1299.00");
        assert_eq!(format_paise(-5), "-0.05");
    }
}
