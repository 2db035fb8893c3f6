//! `ledger-export {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}`: every entry in
//! the range by date then id, with its taxes; JSON or CSV. Reads in pages and
//! reports progress per page.

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{JobContext, ParamsError, ReportKind, RunResult, decode_params};
use crate::ledger::{FieldError, LedgerEntry, format_paise, format_rate, valid_date};

pub struct LedgerExport;

const PAGE: i64 = 5_000;

/// The CSV columns, in the order of `docs/api.md`.
pub const COLUMNS: [&str; 11] = [
    "id",
    "date",
    "direction",
    "amount",
    "gst_rate",
    "interstate",
    "party",
    "description",
    "igst",
    "cgst",
    "sgst",
];

/// The parameters of `ledger-export`: a range of dates, both inclusive.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerExportParams {
    /// The first day, `YYYY-MM-DD`.
    #[schema(example = "2026-10-01")]
    pub from: String,
    /// The last day, `YYYY-MM-DD`, not before `from`.
    #[schema(example = "2026-10-31")]
    pub to: String,
}

impl LedgerExportParams {
    fn parse(params: &Value) -> Result<Self, ParamsError> {
        let params: Self = decode_params(params)?;
        let mut errors = Vec::new();
        for (field, value) in [("from", &params.from), ("to", &params.to)] {
            if !valid_date(value) {
                errors.push(FieldError::new(
                    field,
                    "must be a calendar date written YYYY-MM-DD",
                ));
            }
        }
        if errors.is_empty() && params.from > params.to {
            errors.push(FieldError::new("to", "must not be before from"));
        }
        if errors.is_empty() {
            Ok(params)
        } else {
            Err(ParamsError::Invalid(errors))
        }
    }
}

impl ReportKind for LedgerExport {
    fn name(&self) -> &'static str {
        "ledger-export"
    }

    fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(15 * 60)
    }

    fn validate(&self, params: &Value) -> Result<(), ParamsError> {
        LedgerExportParams::parse(params).map(drop)
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: Value) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            let params = LedgerExportParams::parse(&params)?;
            ctx.progress(0.0).await?;
            let total = ctx
                .store
                .count_entries(&ctx.tenant_id, &params.from, &params.to)
                .await?;
            let mut entries = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
            let mut after: Option<(String, String)> = None;
            loop {
                let page = ctx
                    .store
                    .entries_page(
                        &ctx.tenant_id,
                        &params.from,
                        &params.to,
                        after.as_ref().map(|(d, i)| (d.as_str(), i.as_str())),
                        PAGE,
                    )
                    .await?;
                let Some(last) = page.last() else { break };
                after = Some((last.date.clone(), last.entry_id.clone()));
                let full_page = page.len() as i64 == PAGE;
                entries.extend(page.iter().map(entry_json));
                ctx.progress(entries.len() as f64 / total.max(1) as f64)
                    .await?;
                if !full_page {
                    break;
                }
            }
            Ok(json!({"from": params.from, "to": params.to, "entries": entries}))
        })
    }

    fn to_csv(&self, result: &Value) -> Option<String> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.write_record(COLUMNS).ok()?;
        for entry in result.get("entries")?.as_array()? {
            let record: Vec<String> = COLUMNS
                .iter()
                .map(|c| match &entry[*c] {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    other => other.to_string(),
                })
                .collect();
            writer.write_record(&record).ok()?;
        }
        String::from_utf8(writer.into_inner().ok()?).ok()
    }
}

fn entry_json(entry: &LedgerEntry) -> Value {
    let tax = entry.tax();
    json!({
        "id": entry.entry_id,
        "date": entry.date,
        "direction": entry.direction.as_str(),
        "amount": format_paise(entry.amount_paise),
        "gst_rate": format_rate(entry.rate_centi),
        "interstate": entry.interstate,
        "party": entry.party,
        "description": entry.description,
        "igst": format_paise(tax.igst),
        "cgst": format_paise(tax.cgst),
        "sgst": format_paise(tax.sgst),
    })
}
