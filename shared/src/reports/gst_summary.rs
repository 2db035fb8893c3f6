//! `gst-summary {"month": "YYYY-MM"}`: outward and inward GST of a month per
//! rate and in total, and the net payable. Aggregated in SQL
//! (`Store::gst_rows`), assembled here.

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{JobContext, ParamsError, ReportKind, RunResult, decode_params};
use crate::{
    ledger::{Direction, FieldError, format_paise, format_rate, month_bounds, valid_month},
    store::GstRow,
};

pub struct GstSummary;

/// The parameters of `gst-summary`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GstSummaryParams {
    /// The month, `YYYY-MM`.
    #[schema(example = "2026-10")]
    pub month: String,
}

impl ReportKind for GstSummary {
    type Params = GstSummaryParams;

    fn name(&self) -> &'static str {
        "gst-summary"
    }

    fn parse(&self, params: &Value) -> Result<GstSummaryParams, ParamsError> {
        let params: GstSummaryParams = decode_params(params)?;
        if valid_month(&params.month) {
            Ok(params)
        } else {
            Err(ParamsError::Invalid(vec![FieldError::new(
                "month",
                "must be a month written YYYY-MM",
            )]))
        }
    }

    fn run<'a>(
        &'a self,
        ctx: &'a JobContext,
        params: GstSummaryParams,
    ) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            ctx.progress(0.0).await?;
            let (from, to) = month_bounds(&params.month);
            let rows = ctx.store.gst_rows(&ctx.tenant_id, &from, &to).await?;
            ctx.checkpoint()?;
            Ok(summary(&params.month, &rows).into())
        })
    }
}

#[derive(Default, Clone, Copy)]
struct Sums {
    taxable: i64,
    igst: i64,
    cgst: i64,
    sgst: i64,
}

impl Sums {
    fn add(&mut self, row: &GstRow) {
        self.taxable += row.taxable;
        self.igst += row.igst;
        self.cgst += row.cgst;
        self.sgst += row.sgst;
    }

    fn to_json(self) -> Value {
        json!({
            "taxable": format_paise(self.taxable),
            "igst": format_paise(self.igst),
            "cgst": format_paise(self.cgst),
            "sgst": format_paise(self.sgst),
        })
    }
}

fn side(rows: &[GstRow], direction: Direction) -> (Value, Sums) {
    let mut rows: Vec<&GstRow> = rows.iter().filter(|r| r.direction == direction).collect();
    rows.sort_by_key(|r| r.rate_centi);
    let mut total = Sums::default();
    let by_rate: Vec<Value> = rows
        .iter()
        .map(|row| {
            total.add(row);
            let mut one = Sums::default();
            one.add(row);
            let mut value = one.to_json();
            value["rate"] = Value::String(format_rate(row.rate_centi));
            value
        })
        .collect();
    (json!({"by_rate": by_rate, "total": total.to_json()}), total)
}

/// The result object of `docs/api.md` from the per-rate sums.
pub fn summary(month: &str, rows: &[GstRow]) -> Value {
    let (outward, out) = side(rows, Direction::Sale);
    let (inward, inn) = side(rows, Direction::Purchase);
    let igst = out.igst - inn.igst;
    let cgst = out.cgst - inn.cgst;
    let sgst = out.sgst - inn.sgst;
    json!({
        "month": month,
        "outward": outward,
        "inward": inward,
        "net_payable": {
            "igst": format_paise(igst),
            "cgst": format_paise(cgst),
            "sgst": format_paise(sgst),
            "total": format_paise(igst + cgst + sgst),
        }
    })
}
