//! `gst-summary {"month": "YYYY-MM"}`: outward and inward GST of a month per
//! rate and in total, and the net payable. Aggregated in SQL
//! (`Store::gst_rows`), assembled here.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{JobContext, ParamsError, ReportKind, RunResult};
use shared::{
    calendar::Month,
    ledger::{Direction, FieldError, format_paise, format_rate},
    report_params::GstSummaryParams,
};
use store::GstRow;

pub struct GstSummary;

impl ReportKind for GstSummary {
    type Body = GstSummaryParams;
    type Params = Month;

    fn name(&self) -> &'static str {
        "gst-summary"
    }

    fn about(&self) -> &'static str {
        "A month's GST: outward (sales) and inward (purchases), per rate and in total, and the net payable."
    }

    fn check(&self, params: &GstSummaryParams) -> Result<Month, ParamsError> {
        Month::parse(&params.month).ok_or_else(|| {
            ParamsError::Invalid(vec![FieldError::new(
                "month",
                "must be a month written YYYY-MM",
            )])
        })
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, month: Month) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            ctx.progress(0.0).await?;
            let rows = month_rows(&ctx.store, &ctx.tenant_id, month).await?;
            ctx.checkpoint()?;
            Ok(summary(month, &rows).into())
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

/// The per-rate sums of the month's entries.
pub async fn month_rows(
    store: &store::Store,
    tenant_id: &str,
    month: Month,
) -> store::Result<Vec<GstRow>> {
    let (from, to) = (month.first_day().to_string(), month.last_day().to_string());
    store.gst_rows(tenant_id, &from, &to).await
}

/// The result object of `docs/api.md` from the per-rate sums.
pub fn summary(month: Month, rows: &[GstRow]) -> Value {
    let (outward, out) = side(rows, Direction::Sale);
    let (inward, inn) = side(rows, Direction::Purchase);
    let igst = out.igst - inn.igst;
    let cgst = out.cgst - inn.cgst;
    let sgst = out.sgst - inn.sgst;
    json!({
        "month": month.to_string(),
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
