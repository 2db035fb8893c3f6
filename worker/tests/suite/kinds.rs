//! Each report kind run through the worker on a job submitted to the
//! store: what it stores (one document, or chunks the kind renders as
//! JSON or CSV), and how a run whose stored parameters make no sense ends.

use reports::{Registry, ResultFormat};
use serde_json::{Value, json};
use shared::{
    ledger::{LedgerEntry, LedgerEntryInput},
    model::JobStatus,
};
use store::{ImportOutcome, Store, StoredResult};
use testkit::ledger::{hand_worked_ledger, plain};
use testkit::{Backend, TestEnv};
use worker::{Runner, drive::run_due_jobs};

use crate::{
    harness::{error_of, job, new_job, runner, status_and_attempts, submit, submit_due_since},
    on_both_backends,
};

on_both_backends!(
    sleep_stores_one_document_naming_its_attempt,
    gst_summary_matches_hand_worked_figures_rounding_half_up_per_entry,
    net_payable_goes_negative_in_a_month_of_only_purchases,
    a_month_without_entries_sums_to_zero,
    ledger_export_writes_the_range_in_chunks_by_date_then_id_with_each_entrys_taxes,
    ledger_export_of_one_day_includes_both_bounds,
    ledger_export_renders_csv_with_a_header_row_quoting_and_formulas_as_text,
    an_empty_ledger_export_is_no_chunk_and_its_csv_the_header_row_alone,
    a_ledger_export_of_several_pages_is_several_chunks_that_render_as_one_document,
    a_report_reads_only_its_own_tenants_ledger,
    stored_parameters_that_make_no_sense_fail_the_job_at_once,
    a_job_of_a_kind_the_worker_does_not_serve_fails_at_once,
);

/// Imports `entries` (as a client writes them) for `tenant`, as the API's
/// import does once it has checked them.
async fn import(store: &Store, tenant: &str, entries: Value) {
    let entries: Vec<LedgerEntry> = serde_json::from_value::<Vec<LedgerEntryInput>>(entries)
        .expect("entries")
        .iter()
        .enumerate()
        .map(|(i, entry)| entry.validate(&format!("entries[{i}]")).expect("valid").0)
        .collect();
    let mut tx = store.begin_write().await.expect("begin");
    let outcome = store
        .import_entries(&mut tx, tenant, &entries)
        .await
        .expect("import");
    tx.commit().await.expect("commit");
    assert!(
        matches!(outcome, ImportOutcome::Imported { skipped: 0, .. }),
        "{outcome:?}"
    );
}

/// Runs a report of `tenant` to SUCCEEDED; returns its job id.
async fn run_report(runner: &Runner, tenant: &str, kind: &str, params: Value) -> String {
    let job_id = submit_due_since(&runner.store, new_job(tenant, kind, &params), 0).await;
    assert_eq!(run_due_jobs(runner).await.expect("run"), 1);
    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Succeeded, 1),
        "{kind} {params}: {:?}",
        error_of(&runner.store, &job_id).await
    );
    job_id
}

/// The result of a report whose kind stores one document.
async fn document(runner: &Runner, tenant: &str, kind: &str, params: Value) -> Value {
    let job_id = run_report(runner, tenant, kind, params).await;
    let stored = runner.store.stored_result(tenant, &job_id).await.unwrap();
    let Some(StoredResult::Document(body)) = stored else {
        panic!("{kind}: not one document: {stored:?}");
    };
    serde_json::from_str(&body).expect("JSON")
}

/// A result stored in chunks, rendered in `format` as the API serves it:
/// the kind's renderer over the chunks in order. Answers the chunks'
/// count and the text.
async fn rendered(
    store: &Store,
    tenant: &str,
    job_id: &str,
    format: ResultFormat,
) -> (i64, String) {
    let stored = store.stored_result(tenant, job_id).await.unwrap();
    let Some(StoredResult::Chunks { attempt, count }) = stored else {
        panic!("not a result in chunks: {stored:?}");
    };
    let job = job(store, job_id).await;
    let params: Value = serde_json::from_str(&job.params).expect("stored parameters");
    let mut renderer = Registry::new(false)
        .get(&job.kind)
        .expect("the kind")
        .chunk_renderer(&params, format)
        .expect("a renderer");
    let mut text = renderer.head().expect("head");
    for seq in 0..count {
        let chunk = store
            .result_chunk(job_id, attempt, seq)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("chunk {seq} of {count}"));
        text.push_str(&renderer.chunk(&chunk).expect("a chunk"));
    }
    text.push_str(&renderer.tail().expect("tail"));
    (count, text)
}

/// A `ledger-export` of tenant-a's `[from, to]`, as JSON.
async fn ledger_export(runner: &Runner, from: &str, to: &str) -> Value {
    let job_id = run_report(
        runner,
        "tenant-a",
        "ledger-export",
        json!({"from": from, "to": to}),
    )
    .await;
    let (_, text) = rendered(&runner.store, "tenant-a", &job_id, ResultFormat::Json).await;
    serde_json::from_str(&text).expect("the rendered JSON")
}

/// The ids a ledger export lists, in its order.
async fn exported_ids(runner: &Runner, from: &str, to: &str) -> Vec<String> {
    ledger_export(runner, from, to).await["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

/// The summary of a month without entries.
fn empty_summary(month: &str) -> Value {
    let zero = json!({"taxable": "0.00", "igst": "0.00", "cgst": "0.00", "sgst": "0.00"});
    json!({
        "month": month,
        "outward": {"by_rate": [], "total": zero},
        "inward": {"by_rate": [], "total": zero},
        "net_payable": {"igst": "0.00", "cgst": "0.00", "sgst": "0.00", "total": "0.00"},
    })
}

async fn sleep_stores_one_document_naming_its_attempt(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;

    let result = document(&runner, "tenant-a", "sleep", json!({"ms": 1})).await;

    assert_eq!(result, json!({"slept_ms": 1, "attempt": 1}));
}

// ---------------------------------------------------------------- gst-summary

async fn gst_summary(runner: &Runner, month: &str) -> Value {
    document(runner, "tenant-a", "gst-summary", json!({"month": month})).await
}

async fn gst_summary_matches_hand_worked_figures_rounding_half_up_per_entry(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", hand_worked_ledger()).await;

    let october = gst_summary(&runner, "2026-10").await;

    assert_eq!(
        october,
        json!({
            "month": "2026-10",
            "outward": {
                "by_rate": [
                    {"rate": "0", "taxable": "1000.00", "igst": "0.00", "cgst": "0.00", "sgst": "0.00"},
                    {"rate": "0.25", "taxable": "6.00", "igst": "0.01", "cgst": "0.01", "sgst": "0.01"},
                    {"rate": "5", "taxable": "1.50", "igst": "0.03", "cgst": "0.03", "sgst": "0.03"},
                    {"rate": "12", "taxable": "100.25", "igst": "12.00", "cgst": "0.02", "sgst": "0.02"},
                    {"rate": "18", "taxable": "1300.25", "igst": "0.10", "cgst": "116.98", "sgst": "116.98"},
                ],
                "total": {"taxable": "2408.00", "igst": "12.14", "cgst": "117.04", "sgst": "117.04"},
            },
            "inward": {
                "by_rate": [
                    {"rate": "5", "taxable": "1.00", "igst": "0.00", "cgst": "0.03", "sgst": "0.03"},
                    {"rate": "18", "taxable": "500.25", "igst": "90.05", "cgst": "0.00", "sgst": "0.00"},
                    {"rate": "28", "taxable": "10.25", "igst": "2.80", "cgst": "0.04", "sgst": "0.04"},
                ],
                "total": {"taxable": "511.50", "igst": "92.85", "cgst": "0.07", "sgst": "0.07"},
            },
            // 12.14 - 92.85 = -80.71; 117.04 - 0.07 = 116.97; -80.71 + 2 * 116.97 = 153.23.
            "net_payable": {"igst": "-80.71", "cgst": "116.97", "sgst": "116.97", "total": "153.23"},
        })
    );
}

async fn net_payable_goes_negative_in_a_month_of_only_purchases(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", hand_worked_ledger()).await;

    let november = gst_summary(&runner, "2026-11").await;

    assert_eq!(
        november,
        json!({
            "month": "2026-11",
            "outward": {
                "by_rate": [],
                "total": {"taxable": "0.00", "igst": "0.00", "cgst": "0.00", "sgst": "0.00"},
            },
            "inward": {
                "by_rate": [
                    {"rate": "28", "taxable": "20.00", "igst": "0.00", "cgst": "2.80", "sgst": "2.80"},
                ],
                "total": {"taxable": "20.00", "igst": "0.00", "cgst": "2.80", "sgst": "2.80"},
            },
            "net_payable": {"igst": "0.00", "cgst": "-2.80", "sgst": "-2.80", "total": "-5.60"},
        })
    );
}

async fn a_month_without_entries_sums_to_zero(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", hand_worked_ledger()).await;

    let december = gst_summary(&runner, "2026-12").await;

    assert_eq!(december, empty_summary("2026-12"));
}

// ------------------------------------------------------------ ledger-export

/// Imported out of order: the export sorts by date, then id (`a-10` before
/// `a-9` before `b-2`: ids compare as text).
fn export_ledger() -> Value {
    let with_text = |id: &str, date, direction, amount, rate, interstate, party, text| {
        let mut entry = plain(id, date, direction, amount, rate, interstate);
        entry["party"] = json!(party);
        entry["description"] = json!(text);
        entry
    };
    json!([
        plain("b-2", "2026-10-15", "sale", "4.00", "0.25", false),
        plain("x-after", "2026-11-01", "sale", "1.00", "5", false),
        plain("a-last", "2026-10-31", "purchase", "1000", "0", false),
        plain("a-9", "2026-10-15", "sale", "1299.5", "28", true),
        plain("x-before", "2026-09-30", "sale", "1.00", "5", false),
        with_text(
            "a-10",
            "2026-10-15",
            "purchase",
            "1.00",
            "5",
            false,
            "Plain",
            "two\nlines"
        ),
        with_text(
            "z-first",
            "2026-10-01",
            "sale",
            "0.25",
            "18",
            true,
            "Acme, \"Best\" Traders",
            "widgets"
        ),
    ])
}

async fn ledger_export_writes_the_range_in_chunks_by_date_then_id_with_each_entrys_taxes(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", export_ledger()).await;

    let job_id = run_report(
        &runner,
        "tenant-a",
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
    )
    .await;

    assert_eq!(job(&runner.store, &job_id).await.progress, Some(1.0));
    let (chunks, text) = rendered(&runner.store, "tenant-a", &job_id, ResultFormat::Json).await;
    assert_eq!(chunks, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("JSON"),
        json!({
            "from": "2026-10-01",
            "to": "2026-10-31",
            "entries": [
                {"id": "z-first", "date": "2026-10-01", "direction": "sale", "amount": "0.25",
                 "gst_rate": "18", "interstate": true, "party": "Acme, \"Best\" Traders",
                 "description": "widgets", "igst": "0.05", "cgst": "0.00", "sgst": "0.00"},
                {"id": "a-10", "date": "2026-10-15", "direction": "purchase", "amount": "1.00",
                 "gst_rate": "5", "interstate": false, "party": "Plain",
                 "description": "two\nlines", "igst": "0.00", "cgst": "0.03", "sgst": "0.03"},
                {"id": "a-9", "date": "2026-10-15", "direction": "sale", "amount": "1299.50",
                 "gst_rate": "28", "interstate": true, "party": "",
                 "description": "", "igst": "363.86", "cgst": "0.00", "sgst": "0.00"},
                {"id": "b-2", "date": "2026-10-15", "direction": "sale", "amount": "4.00",
                 "gst_rate": "0.25", "interstate": false, "party": "",
                 "description": "", "igst": "0.00", "cgst": "0.01", "sgst": "0.01"},
                {"id": "a-last", "date": "2026-10-31", "direction": "purchase", "amount": "1000.00",
                 "gst_rate": "0", "interstate": false, "party": "",
                 "description": "", "igst": "0.00", "cgst": "0.00", "sgst": "0.00"},
            ],
        })
    );
}

async fn ledger_export_of_one_day_includes_both_bounds(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", export_ledger()).await;

    let one_day = exported_ids(&runner, "2026-10-15", "2026-10-15").await;
    let edges = exported_ids(&runner, "2026-09-30", "2026-10-01").await;
    let none = exported_ids(&runner, "2026-10-02", "2026-10-14").await;

    assert_eq!(one_day, ["a-10", "a-9", "b-2"]);
    assert_eq!(edges, ["x-before", "z-first"]);
    assert!(none.is_empty(), "{none:?}");
}

/// Client text a spreadsheet would run as a formula (OWASP's CSV
/// injection), each opening a cell.
const FORMULA_STARTS: [&str; 6] = [
    "=HYPERLINK(\"http://evil.example\",\"Click\")",
    "+1-555-0100",
    "-2+3",
    "@SUM(A1:A9)",
    "\t=1+1",
    "\r=1+1",
];

async fn ledger_export_renders_csv_with_a_header_row_quoting_and_formulas_as_text(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", export_ledger()).await;
    let mut formulas = Vec::new();
    for (i, text) in FORMULA_STARTS.iter().enumerate() {
        let mut entry = plain(
            &format!("f-{i}"),
            "2026-12-02",
            "sale",
            "100.00",
            "18",
            false,
        );
        entry["party"] = json!(text);
        entry["description"] = json!(text);
        formulas.push(entry);
    }
    let mut safe = plain("=id", "2026-12-03", "purchase", "0", "0", true);
    safe["party"] = json!("Plain, \"safe\" = fine");
    safe["description"] = json!("a-b");
    formulas.push(safe);
    import(&runner.store, "tenant-a", Value::Array(formulas)).await;

    let october = run_report(
        &runner,
        "tenant-a",
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
    )
    .await;
    let december = run_report(
        &runner,
        "tenant-a",
        "ledger-export",
        json!({"from": "2026-12-01", "to": "2026-12-31"}),
    )
    .await;

    let (_, csv) = rendered(&runner.store, "tenant-a", &october, ResultFormat::Csv).await;
    assert_eq!(
        csv.replace("\r\n", "\n"),
        "id,date,direction,amount,gst_rate,interstate,party,description,igst,cgst,sgst\n\
         z-first,2026-10-01,sale,0.25,18,true,\"Acme, \"\"Best\"\" Traders\",widgets,0.05,0.00,0.00\n\
         a-10,2026-10-15,purchase,1.00,5,false,Plain,\"two\nlines\",0.00,0.03,0.03\n\
         a-9,2026-10-15,sale,1299.50,28,true,,,363.86,0.00,0.00\n\
         b-2,2026-10-15,sale,4.00,0.25,false,,,0.00,0.01,0.01\n\
         a-last,2026-10-31,purchase,1000.00,0,false,,,0.00,0.00,0.00\n"
    );
    // Read back as a spreadsheet imports CSV: quoted cells, one record per row.
    let (_, csv) = rendered(&runner.store, "tenant-a", &december, ResultFormat::Csv).await;
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().expect("a header row").clone();
    let records: Vec<csv::StringRecord> = reader
        .records()
        .collect::<Result<_, _>>()
        .expect("valid CSV");
    let cell = |record: &csv::StringRecord, column: &str| -> String {
        let at = header.iter().position(|h| h == column).expect(column);
        record[at].to_owned()
    };
    assert_eq!(records.len(), FORMULA_STARTS.len() + 1);
    for (record, text) in records.iter().zip(FORMULA_STARTS) {
        assert_eq!(cell(record, "party"), format!("'{text}"));
        assert_eq!(cell(record, "description"), format!("'{text}"));
    }
    let plain = &records[FORMULA_STARTS.len()];
    assert_eq!(cell(plain, "id"), "'=id");
    assert_eq!(cell(plain, "party"), "Plain, \"safe\" = fine");
    assert_eq!(cell(plain, "description"), "a-b");
    for record in &records {
        for (column, value) in header.iter().zip(record.iter()) {
            assert!(
                !value.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{column} {value:?} would be read as a formula"
            );
        }
        for column in ["amount", "igst", "cgst", "sgst"] {
            let amount = cell(record, column);
            assert!(
                amount.bytes().all(|b| b.is_ascii_digit() || b == b'.'),
                "{column} {amount:?}"
            );
        }
    }
    // The JSON carries the text exactly as stored.
    let (_, json) = rendered(&runner.store, "tenant-a", &december, ResultFormat::Json).await;
    let exported: Value = serde_json::from_str(&json).expect("JSON");
    let parties: Vec<&str> = exported["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["party"].as_str().expect("party"))
        .collect();
    let mut expected: Vec<&str> = FORMULA_STARTS.to_vec();
    expected.push("Plain, \"safe\" = fine");
    assert_eq!(parties, expected);
}

async fn an_empty_ledger_export_is_no_chunk_and_its_csv_the_header_row_alone(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;

    let job_id = run_report(
        &runner,
        "tenant-a",
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
    )
    .await;

    let (chunks, csv) = rendered(&runner.store, "tenant-a", &job_id, ResultFormat::Csv).await;
    assert_eq!(chunks, 0);
    assert_eq!(
        csv.replace("\r\n", "\n"),
        "id,date,direction,amount,gst_rate,interstate,party,description,igst,cgst,sgst\n"
    );
    let (_, json) = rendered(&runner.store, "tenant-a", &job_id, ResultFormat::Json).await;
    assert_eq!(
        serde_json::from_str::<Value>(&json).expect("JSON"),
        json!({"from": "2026-10-01", "to": "2026-10-31", "entries": []})
    );
}

async fn a_ledger_export_of_several_pages_is_several_chunks_that_render_as_one_document(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    // More than one page (5,000 entries) read, more than one chunk
    // (256 KiB) written.
    let entries: Vec<Value> = (0..6_000)
        .map(|i| {
            let mut entry = plain(
                &format!("e-{i:05}"),
                &format!("2026-10-{:02}", 1 + i % 28),
                "sale",
                "12.34",
                "18",
                i % 2 == 0,
            );
            entry["description"] = json!("x".repeat(40));
            entry
        })
        .collect();
    import(&runner.store, "tenant-a", Value::Array(entries)).await;

    let job_id = run_report(
        &runner,
        "tenant-a",
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
    )
    .await;

    let (chunks, text) = rendered(&runner.store, "tenant-a", &job_id, ResultFormat::Json).await;
    assert!(chunks > 1, "{chunks} chunks");
    let export: Value = serde_json::from_str(&text).expect("one JSON document");
    let ids: Vec<&str> = export["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    let mut expected: Vec<(String, String)> = (0..6_000)
        .map(|i| (format!("2026-10-{:02}", 1 + i % 28), format!("e-{i:05}")))
        .collect();
    expected.sort();
    assert_eq!(ids.len(), 6_000);
    assert!(
        ids.iter().zip(&expected).all(|(id, (_, want))| id == want),
        "the entries by date then id"
    );
}

async fn a_report_reads_only_its_own_tenants_ledger(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    import(&runner.store, "tenant-a", hand_worked_ledger()).await;
    // The same id in tenant B is B's own entry.
    import(
        &runner.store,
        "tenant-b",
        json!([plain("o-0", "2026-10-15", "purchase", "7.00", "5", true)]),
    )
    .await;

    let b_october = document(
        &runner,
        "tenant-b",
        "gst-summary",
        json!({"month": "2026-10"}),
    )
    .await;
    let b_export = run_report(
        &runner,
        "tenant-b",
        "ledger-export",
        json!({"from": "2020-01-01", "to": "2030-12-31"}),
    )
    .await;

    assert_eq!(b_october["outward"]["by_rate"], json!([]));
    assert_eq!(
        b_october["inward"]["total"],
        json!({"taxable": "7.00", "igst": "0.35", "cgst": "0.00", "sgst": "0.00"})
    );
    let (_, text) = rendered(&runner.store, "tenant-b", &b_export, ResultFormat::Json).await;
    let exported: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(exported["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(exported["entries"][0]["direction"], "purchase");
    assert_eq!(
        gst_summary(&runner, "2026-10").await["net_payable"]["total"],
        "153.23",
        "tenant A's October is its own"
    );
}

async fn stored_parameters_that_make_no_sense_fail_the_job_at_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    // Checked at submit by the API; a job stored with them anyway (a kind
    // changed under it) would fail the same way on every attempt.
    let cases = [
        ("gst-summary", json!({"month": "2026-13"})),
        ("gst-summary", json!(["2026-10"])),
        (
            "ledger-export",
            json!({"from": "2026-10-31", "to": "2026-10-01"}),
        ),
        ("period-close", json!({"month": "October"})),
        ("sleep", json!({"ms": "5"})),
        ("sleep", json!({"ms": 1, "seconds": 1})),
    ];
    let mut job_ids = Vec::new();
    for (kind, params) in &cases {
        job_ids.push(submit(&runner.store, kind, params.clone()).await);
    }

    assert_eq!(run_due_jobs(&runner).await.expect("run"), cases.len());

    for ((kind, params), job_id) in cases.iter().zip(&job_ids) {
        let context = format!("{kind} {params}");
        assert_eq!(
            status_and_attempts(&runner.store, job_id).await,
            (JobStatus::Failed, 1),
            "{context}"
        );
        let (error_type, message) = error_of(&runner.store, job_id).await.expect(&context);
        assert_eq!(error_type, "invalid_params", "{context}: {message}");
        assert!(!message.is_empty(), "{context}");
        assert_eq!(runner.store.count_results(job_id).await.unwrap(), 0);
    }
}

async fn a_job_of_a_kind_the_worker_does_not_serve_fails_at_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let job_id = submit(&runner.store, "no-such-kind", json!({})).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(
        status_and_attempts(&runner.store, &job_id).await,
        (JobStatus::Failed, 1)
    );
    let (error_type, message) = error_of(&runner.store, &job_id).await.expect("an error");
    assert_eq!(error_type, "unknown_kind");
    assert!(message.contains("no-such-kind"), "{message}");
}
