//! `ledger-export {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}`: every entry in
//! the range by date then id, with its taxes; JSON or CSV. Reads in pages,
//! writes the result in chunks as it goes, and reports progress per page.

use std::borrow::Cow;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::{
    ChunkRenderer, ChunkWriter, JobContext, ParamsError, ReportKind, ResultFormat, RunResult,
};
use shared::{
    calendar::Date,
    ledger::{FieldError, LedgerEntry, format_paise, format_rate},
    report_params::LedgerExportParams,
};

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

/// The parameters of `ledger-export` once checked: both days in their
/// canonical text, which is what the store compares.
pub struct DateRange {
    from: String,
    to: String,
}

impl ReportKind for LedgerExport {
    type Body = LedgerExportParams;
    type Params = DateRange;

    fn name(&self) -> &'static str {
        "ledger-export"
    }

    fn about(&self) -> &'static str {
        "Every ledger entry dated in a range, by date then id, with its taxes: JSON, or CSV with `Accept: text/csv`."
    }

    fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(15 * 60)
    }

    fn check(&self, params: &LedgerExportParams) -> Result<DateRange, ParamsError> {
        let mut errors = Vec::new();
        let mut day = |field: &str, text: &str| {
            let date = Date::parse(text);
            if date.is_none() {
                errors.push(FieldError::new(
                    field,
                    "must be a calendar date written YYYY-MM-DD",
                ));
            }
            date
        };
        let (from, to) = (day("from", &params.from), day("to", &params.to));
        match (from, to) {
            (Some(from), Some(to)) if from > to => {
                Err(ParamsError::Invalid(vec![FieldError::new(
                    "to",
                    "must not be before from",
                )]))
            }
            (Some(from), Some(to)) => Ok(DateRange {
                from: from.to_string(),
                to: to.to_string(),
            }),
            _ => Err(ParamsError::Invalid(errors)),
        }
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: DateRange) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            ctx.progress(0.0).await?;
            let total = ctx
                .store
                .count_entries(&ctx.tenant_id, &params.from, &params.to)
                .await?;
            // A range may hold millions of entries: they go out in chunks
            // as they are read, never all in memory.
            let mut chunks = ChunkWriter::start(ctx).await?;
            let mut done = 0usize;
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
                for entry in &page {
                    chunks.push(&Row::of(entry)).await?;
                }
                done += page.len();
                ctx.progress(done as f64 / total.max(1) as f64).await?;
                if !full_page {
                    break;
                }
            }
            chunks.finish().await
        })
    }

    fn chunk_renderer(
        &self,
        params: &DateRange,
        format: ResultFormat,
    ) -> Option<Box<dyn ChunkRenderer>> {
        Some(match format {
            ResultFormat::Json => Box::new(JsonRenderer {
                head: format!(
                    "{{\"from\":{},\"to\":{},\"entries\":[",
                    serde_json::to_string(&params.from).ok()?,
                    serde_json::to_string(&params.to).ok()?
                ),
                first: true,
            }),
            ResultFormat::Csv => Box::new(CsvRenderer),
        })
    }
}

/// One exported entry: the JSON answer's object, its fields in `docs/api.md`'s
/// order (the order the JSON is written in), and the CSV's columns.
#[derive(Debug, Serialize, Deserialize)]
struct Row<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    date: Cow<'a, str>,
    #[serde(borrow)]
    direction: Cow<'a, str>,
    #[serde(borrow)]
    amount: Cow<'a, str>,
    #[serde(borrow)]
    gst_rate: Cow<'a, str>,
    interstate: bool,
    #[serde(borrow)]
    party: Cow<'a, str>,
    #[serde(borrow)]
    description: Cow<'a, str>,
    #[serde(borrow)]
    igst: Cow<'a, str>,
    #[serde(borrow)]
    cgst: Cow<'a, str>,
    #[serde(borrow)]
    sgst: Cow<'a, str>,
}

impl<'a> Row<'a> {
    fn of(entry: &'a LedgerEntry) -> Self {
        let tax = entry.tax();
        Row {
            id: Cow::Borrowed(&entry.entry_id),
            date: Cow::Borrowed(&entry.date),
            direction: Cow::Borrowed(entry.direction.as_str()),
            amount: Cow::Owned(format_paise(entry.amount_paise)),
            gst_rate: Cow::Owned(format_rate(entry.rate_centi)),
            interstate: entry.interstate,
            party: Cow::Borrowed(&entry.party),
            description: Cow::Borrowed(&entry.description),
            igst: Cow::Owned(format_paise(tax.igst)),
            cgst: Cow::Owned(format_paise(tax.cgst)),
            sgst: Cow::Owned(format_paise(tax.sgst)),
        }
    }
}

/// The JSON answer: `{"from":..,"to":..,"entries":[` + the chunks, joined
/// by commas, + `]}`, byte for byte what serialising the whole document
/// gives.
struct JsonRenderer {
    head: String,
    first: bool,
}

impl ChunkRenderer for JsonRenderer {
    fn head(&mut self) -> store::Result<String> {
        Ok(std::mem::take(&mut self.head))
    }

    fn chunk(&mut self, body: &str) -> store::Result<String> {
        let mut text = String::with_capacity(body.len() + 1);
        if !std::mem::take(&mut self.first) {
            text.push(',');
        }
        text.push_str(body);
        Ok(text)
    }

    fn tail(&mut self) -> store::Result<String> {
        Ok("]}".to_owned())
    }
}

/// The CSV answer: the header row, then each chunk's rows.
struct CsvRenderer;

impl ChunkRenderer for CsvRenderer {
    fn head(&mut self) -> store::Result<String> {
        let mut csv = CsvRows::new();
        csv.header().map_err(|e| unwritable(&e))?;
        csv.take().ok_or_else(|| unwritable(&"the header row"))
    }

    fn chunk(&mut self, body: &str) -> store::Result<String> {
        let mut array = String::with_capacity(body.len() + 2);
        array.push('[');
        array.push_str(body);
        array.push(']');
        let rows: Vec<Row> = serde_json::from_str(&array).map_err(|e| unwritable(&e))?;
        let mut csv = CsvRows::new();
        for row in &rows {
            csv.row(row).map_err(|e| unwritable(&e))?;
        }
        csv.take().ok_or_else(|| unwritable(&"a chunk"))
    }

    fn tail(&mut self) -> store::Result<String> {
        Ok(String::new())
    }
}

fn unwritable(cause: &dyn std::fmt::Display) -> store::Error {
    store::Error::Corrupt(format!("a ledger-export result as CSV: {cause}"))
}

/// CSV text of rows, with the `csv` crate's quoting and CRLF line ends.
struct CsvRows(csv::Writer<Vec<u8>>);

impl CsvRows {
    fn new() -> Self {
        CsvRows(csv::Writer::from_writer(Vec::new()))
    }

    fn header(&mut self) -> csv::Result<()> {
        self.0.write_record(COLUMNS)
    }

    fn row(&mut self, row: &Row) -> csv::Result<()> {
        self.0.write_record([
            &*neutralised(&row.id),
            &row.date,
            &row.direction,
            &row.amount,
            &row.gst_rate,
            if row.interstate { "true" } else { "false" },
            &neutralised(&row.party),
            &neutralised(&row.description),
            &row.igst,
            &row.cgst,
            &row.sgst,
        ])
    }

    /// The text written; `None` only if the writer failed, which writing
    /// text into memory does not.
    fn take(self) -> Option<String> {
        String::from_utf8(self.0.into_inner().ok()?).ok()
    }
}

/// A cell of text a client wrote, made safe to open in a spreadsheet
/// (OWASP, CSV injection): a cell beginning with `=`, `+`, `-`, `@`, a tab
/// or a carriage return would be read as a formula, so it gets a leading
/// `'`, which spreadsheets show as text. The other columns are ours: dates,
/// fixed words, and amounts and taxes that are never negative.
fn neutralised(cell: &str) -> Cow<'_, str> {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}
