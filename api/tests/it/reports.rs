//! The ledger and its reports through the API: the import's natural
//! idempotency, tenant isolation, `gst-summary` against hand-computed
//! figures and against a from-first-principles model of random ledgers, and
//! `ledger-export` as JSON and CSV.

use std::collections::{BTreeMap, HashSet};
use testkit::ledger::{hand_worked_ledger, plain};

use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::{StatusCode, header::ACCEPT};
use serde_json::{Value, json};

use crate::common::{Api, Backend, Reply, StoreOf, TestEnv};

/// One import entry, as a client writes it.
#[allow(clippy::too_many_arguments)]
fn entry(
    id: &str,
    date: &str,
    direction: &str,
    amount: &str,
    gst_rate: &str,
    interstate: bool,
    party: &str,
    description: &str,
) -> Value {
    json!({
        "id": id, "date": date, "direction": direction, "amount": amount,
        "gst_rate": gst_rate, "interstate": interstate,
        "party": party, "description": description,
    })
}

/// Imports, asserting 200, and returns `{"inserted", "skipped"}`.
async fn import_ok(api: &Api, entries: Value) -> Value {
    let reply = api.import(entries).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()
}

/// Runs a report to `SUCCEEDED` and returns the job and its result reply.
async fn run_report(api: &Api, kind: &str, params: Value, accept: Option<&str>) -> (Value, Reply) {
    let job = api.submit(kind, params).await;
    let job_id = job["job_id"].as_str().expect("job_id").to_owned();
    let done = api.wait_final(&job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    let mut request = api
        .client
        .get(api.url(&format!("/v1/jobs/{job_id}/result")))
        .bearer_auth(&api.key);
    if let Some(accept) = accept {
        request = request.header(ACCEPT, accept);
    }
    let reply = Api::read(request).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    (done, reply)
}

async fn gst_summary(api: &Api, month: &str) -> Value {
    run_report(api, "gst-summary", json!({ "month": month }), None)
        .await
        .1
        .json()
}

async fn ledger_export(api: &Api, from: &str, to: &str) -> Value {
    run_report(api, "ledger-export", json!({"from": from, "to": to}), None)
        .await
        .1
        .json()
}

/// The ids a ledger export lists, in its order.
async fn exported_ids(api: &Api, from: &str, to: &str) -> Vec<String> {
    ledger_export(api, from, to).await["entries"]
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

// ---------------------------------------------------------------- gst-summary

// ------------------------------------------------------------------- import

fn three_entries() -> Value {
    json!([
        entry(
            "k-1",
            "2026-10-03",
            "sale",
            "100.00",
            "18",
            true,
            "Acme",
            "widgets"
        ),
        entry(
            "k-2",
            "2026-10-04",
            "purchase",
            "50.00",
            "12",
            false,
            "Bolt",
            "bolts"
        ),
        entry(
            "k-3",
            "2026-10-05",
            "sale",
            "10.00",
            "5",
            false,
            "Cog",
            "cogs"
        ),
    ])
}

async fn repeating_an_import_skips_every_entry(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let first = import_ok(&api, three_entries()).await;
    assert_eq!(first, json!({"inserted": 3, "skipped": 0}));
    let before = gst_summary(&api, "2026-10").await;

    let again = import_ok(&api, three_entries()).await;

    assert_eq!(again, json!({"inserted": 0, "skipped": 3}));
    assert_eq!(gst_summary(&api, "2026-10").await, before, "counted once");
}

async fn a_batch_of_new_and_known_entries_inserts_only_the_new(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(&api, three_entries()).await;
    let known = three_entries();

    let reply = import_ok(
        &api,
        json!([
            plain("new-1", "2026-10-06", "sale", "1.00", "5", false),
            known[2],
            plain("new-2", "2026-10-07", "purchase", "2.00", "28", true),
            known[0],
        ]),
    )
    .await;

    assert_eq!(reply, json!({"inserted": 2, "skipped": 2}));
    assert_eq!(
        exported_ids(&api, "2026-10-01", "2026-10-31").await,
        ["k-1", "k-2", "k-3", "new-1", "new-2"]
    );
}

async fn amounts_equal_in_value_are_the_same_content(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(
        &api,
        json!([plain("inv-1", "2026-10-03", "sale", "1299.5", "18", false)]),
    )
    .await;

    let reply = import_ok(
        &api,
        json!([plain("inv-1", "2026-10-03", "sale", "1299.50", "18", false)]),
    )
    .await;

    assert_eq!(reply, json!({"inserted": 0, "skipped": 1}));
    let export = ledger_export(&api, "2026-10-03", "2026-10-03").await;
    assert_eq!(export["entries"][0]["amount"], "1299.50");
}

async fn a_known_id_with_other_content_fails_the_whole_batch_and_stores_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(&api, three_entries()).await;
    let before = ledger_export(&api, "2026-01-01", "2026-12-31").await;
    let original = three_entries()[0].clone();
    // Each field of the content, changed alone, makes another entry.
    let changes = [
        ("date", json!("2026-10-04")),
        ("direction", json!("purchase")),
        ("amount", json!("100.01")),
        ("gst_rate", json!("28")),
        ("interstate", json!(false)),
        ("party", json!("Acme Ltd")),
        ("description", json!("gadgets")),
    ];

    for (field, value) in changes {
        let mut changed = original.clone();
        changed[field] = value;
        let reply = api
            .import(json!([
                plain(
                    &format!("new-{field}"),
                    "2026-10-10",
                    "sale",
                    "5.00",
                    "5",
                    false
                ),
                three_entries()[1],
                changed,
            ]))
            .await;

        let problem = reply.assert_problem(409);
        assert_eq!(problem["ids"], json!(["k-1"]), "{field} changed: {problem}");
    }

    // Two conflicts in one batch are both named.
    let mut k1 = original.clone();
    k1["amount"] = json!("99.99");
    let mut k3 = three_entries()[2].clone();
    k3["party"] = json!("Cog & Sons");
    let reply = api
        .import(json!([
            k3,
            plain("new-both", "2026-10-10", "sale", "5.00", "5", false),
            k1
        ]))
        .await;
    let problem = reply.assert_problem(409);
    let mut ids: Vec<String> = serde_json::from_value(problem["ids"].clone()).expect("ids");
    ids.sort();
    assert_eq!(ids, ["k-1", "k-3"]);

    let after = ledger_export(&api, "2026-01-01", "2026-12-31").await;
    assert_eq!(after, before, "no entry of a refused batch is stored");
}

async fn ten_thousand_entries_are_accepted_and_one_more_is_refused(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let batch = |n: usize| -> Value {
        (0..n)
            .map(|i| {
                plain(
                    &format!("bulk-{i:05}"),
                    "2026-10-15",
                    "sale",
                    "1.00",
                    "18",
                    true,
                )
            })
            .collect()
    };

    let reply = api.import(batch(10_001)).await;

    let problem = reply.assert_problem(422);
    assert_eq!(problem["errors"][0]["field"], "entries", "{problem}");
    assert_eq!(gst_summary(&api, "2026-10").await, empty_summary("2026-10"));

    let accepted = import_ok(&api, batch(10_000)).await;

    assert_eq!(accepted, json!({"inserted": 10_000, "skipped": 0}));
    let october = gst_summary(&api, "2026-10").await;
    // 10,000 x 1.00 taxable; 18% of 1.00 = 0.18 IGST each.
    assert_eq!(
        october["outward"]["total"],
        json!({"taxable": "10000.00", "igst": "1800.00", "cgst": "0.00", "sgst": "0.00"})
    );
}

async fn one_id_twice_in_a_batch_with_different_content_is_refused(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;

    let reply = api
        .import(json!([
            plain("other", "2026-10-01", "sale", "3.00", "12", false),
            plain("twice", "2026-10-02", "sale", "1.00", "18", false),
            plain("twice", "2026-10-02", "sale", "2.00", "18", false),
        ]))
        .await;

    let problem = reply.assert_problem(422);
    let errors = problem["errors"].as_array().expect("errors");
    assert!(
        errors.iter().any(|e| e["field"] == "entries[2].id"),
        "{problem}"
    );
    assert!(
        exported_ids(&api, "2026-01-01", "2026-12-31")
            .await
            .is_empty(),
        "nothing of the batch is stored"
    );
}

async fn another_tenants_ledger_is_invisible(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api_a = env.start_embedded().await;
    let api_b = api_a.as_tenant_b();
    import_ok(&api_a, hand_worked_ledger()).await;
    let a_october = gst_summary(&api_a, "2026-10").await;

    let b_october = gst_summary(&api_b, "2026-10").await;
    let b_export = exported_ids(&api_b, "2020-01-01", "2030-12-31").await;
    // The same id in tenant B is B's own entry, not a conflict with A's.
    let b_import = import_ok(
        &api_b,
        json!([plain("o-0", "2026-10-15", "purchase", "7.00", "5", true)]),
    )
    .await;

    assert_eq!(b_october, empty_summary("2026-10"));
    assert!(b_export.is_empty(), "{b_export:?}");
    assert_eq!(b_import, json!({"inserted": 1, "skipped": 0}));
    assert_eq!(gst_summary(&api_a, "2026-10").await, a_october);
    let b_after = gst_summary(&api_b, "2026-10").await;
    assert_eq!(b_after["outward"]["by_rate"], json!([]));
    assert_eq!(
        b_after["inward"]["total"],
        json!({"taxable": "7.00", "igst": "0.35", "cgst": "0.00", "sgst": "0.00"})
    );
}

// ------------------------------------------------------------ ledger-export

/// Imported out of order: the export sorts by date, then id (`a-10` before
/// `a-9` before `b-2`: ids compare as text).
fn export_ledger() -> Value {
    json!([
        entry("b-2", "2026-10-15", "sale", "4.00", "0.25", false, "", ""),
        entry("x-after", "2026-11-01", "sale", "1.00", "5", false, "", ""),
        entry(
            "a-last",
            "2026-10-31",
            "purchase",
            "1000",
            "0",
            false,
            "",
            ""
        ),
        entry("a-9", "2026-10-15", "sale", "1299.5", "28", true, "", ""),
        entry("x-before", "2026-09-30", "sale", "1.00", "5", false, "", ""),
        entry(
            "a-10",
            "2026-10-15",
            "purchase",
            "1.00",
            "5",
            false,
            "Plain",
            "two\nlines"
        ),
        entry(
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

async fn ledger_export_lists_the_range_by_date_then_id_with_each_entrys_taxes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(&api, export_ledger()).await;

    let (job, reply) = run_report(
        &api,
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
        None,
    )
    .await;

    assert_eq!(job["progress"], 1.0);
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        reply.header("content-type")
    );
    assert_eq!(
        reply.json(),
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

async fn ledger_export_answers_csv_with_a_header_row_and_quoting(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(&api, export_ledger()).await;

    let (_, reply) = run_report(
        &api,
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
        Some("text/csv"),
    )
    .await;

    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/csv")),
        "{:?}",
        reply.header("content-type")
    );
    assert_eq!(
        reply.text.replace("\r\n", "\n"),
        "id,date,direction,amount,gst_rate,interstate,party,description,igst,cgst,sgst\n\
         z-first,2026-10-01,sale,0.25,18,true,\"Acme, \"\"Best\"\" Traders\",widgets,0.05,0.00,0.00\n\
         a-10,2026-10-15,purchase,1.00,5,false,Plain,\"two\nlines\",0.00,0.03,0.03\n\
         a-9,2026-10-15,sale,1299.50,28,true,,,363.86,0.00,0.00\n\
         b-2,2026-10-15,sale,4.00,0.25,false,,,0.00,0.01,0.01\n\
         a-last,2026-10-31,purchase,1000.00,0,false,,,0.00,0.00,0.00\n"
    );
}

async fn an_empty_ledger_export_in_csv_is_the_header_row_alone(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;

    let (_, reply) = run_report(
        &api,
        "ledger-export",
        json!({"from": "2026-10-01", "to": "2026-10-31"}),
        Some("text/csv"),
    )
    .await;

    assert_eq!(
        reply.text.replace("\r\n", "\n"),
        "id,date,direction,amount,gst_rate,interstate,party,description,igst,cgst,sgst\n"
    );
}

async fn gst_summary_is_not_served_as_csv(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    import_ok(&api, hand_worked_ledger()).await;

    let (_, reply) = run_report(
        &api,
        "gst-summary",
        json!({"month": "2026-10"}),
        Some("text/csv"),
    )
    .await;

    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        reply.header("content-type")
    );
    assert_eq!(reply.json()["net_payable"]["total"], "153.23");
}

/// Sends a body with an `Idempotency-Key`, so that the test can tell
/// afterwards whether a refusal stored the key.
async fn post_keyed(api: &Api, path: &str, body: &Value, key: &str) -> Reply {
    Api::read(
        api.client
            .post(api.url(path))
            .bearer_auth(&api.key)
            .header("idempotency-key", key)
            .json(body),
    )
    .await
}

/// The fields a 422 names, each once, sorted; each error has a message.
fn named_fields(reply: &Reply, context: &str) -> Vec<String> {
    let problem = reply.assert_problem(422);
    let mut named: Vec<String> = problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{context}: no errors: {problem}"))
        .iter()
        .map(|e| {
            assert!(
                e["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{context}: {e}"
            );
            e["field"].as_str().expect("field").to_owned()
        })
        .collect();
    named.sort();
    named.dedup();
    named
}

/// Asserts that a refused request stored nothing against its key: the
/// same key with a valid request of the same kind is new (not a replay,
/// not a reuse with a different request).
async fn assert_key_unused(api: &Api, path: &str, valid: &Value, key: &str, context: &str) {
    let retried = post_keyed(api, path, valid, key).await;
    assert!(
        retried.status.is_success(),
        "{context}: the corrected retry with the same key: {} {}",
        retried.status,
        retried.text
    );
    assert_eq!(retried.header("idempotent-replayed"), None, "{context}");
}

async fn report_parameters_of_the_right_type_that_make_no_sense_are_422_and_store_nothing(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    // (kind, parameters, the fields named; none: a 400, the wrong shape)
    let cases: Vec<(&str, Value, Option<Vec<&str>>)> = vec![
        ("sleep", json!({"ms": -1}), Some(vec!["ms"])),
        ("sleep", json!({"ms": 1.5}), Some(vec!["ms"])),
        ("sleep", json!({"ms": 600_001}), Some(vec!["ms"])),
        ("sleep", json!({"ms": 1e300}), Some(vec!["ms"])),
        ("sleep", json!({"ms": u64::MAX}), Some(vec!["ms"])),
        ("sleep", json!({"fail_times": -2}), Some(vec!["fail_times"])),
        (
            "sleep",
            json!({"fail_times": 0.5}),
            Some(vec!["fail_times"]),
        ),
        (
            "sleep",
            json!({"ms": -5, "fail_times": -1, "permanent": true}),
            Some(vec!["fail_times", "ms"]),
        ),
        ("sleep", json!({"ms": "5"}), None),
        ("sleep", json!({"ms": null}), None),
        ("sleep", json!({"fail_times": [1]}), None),
        ("sleep", json!({"permanent": "yes"}), None),
        ("sleep", json!({"seconds": 1}), None),
        (
            "ledger-export",
            json!({"from": "2026-10-31", "to": "2026-10-01"}),
            Some(vec!["to"]),
        ),
        (
            "ledger-export",
            json!({"from": "2026-02-29", "to": "2026-03-01"}),
            Some(vec!["from"]),
        ),
        (
            "ledger-export",
            json!({"from": "2026-10-01", "to": "2026-10-1"}),
            Some(vec!["to"]),
        ),
        (
            "ledger-export",
            json!({"from": "2026/10/01", "to": "soon"}),
            Some(vec!["from", "to"]),
        ),
        (
            "ledger-export",
            json!({"from": "", "to": ""}),
            Some(vec!["from", "to"]),
        ),
        (
            "ledger-export",
            json!({"from": 20261001, "to": "2026-10-31"}),
            None,
        ),
        (
            "gst-summary",
            json!({"month": "2026-13"}),
            Some(vec!["month"]),
        ),
        (
            "gst-summary",
            json!({"month": "2026-1"}),
            Some(vec!["month"]),
        ),
        (
            "gst-summary",
            json!({"month": "2026-10-01"}),
            Some(vec!["month"]),
        ),
        ("gst-summary", json!({"month": ""}), Some(vec!["month"])),
        (
            "gst-summary",
            json!({"month": " 2026-10"}),
            Some(vec!["month"]),
        ),
        ("gst-summary", json!({"month": 202610}), None),
        ("gst-summary", json!({"month": null}), None),
    ];
    let valid = |kind: &str| match kind {
        "sleep" => json!({"ms": 1}),
        "ledger-export" => json!({"from": "2026-10-01", "to": "2026-10-31"}),
        _ => json!({"month": "2026-10"}),
    };

    let mut jobs_made = 0;
    for (i, (kind, params, fields)) in cases.iter().enumerate() {
        let context = format!("{kind} {params}");
        let path = format!("/v1/reports/{kind}");
        let key = format!("nonsense-{i}");

        let reply = post_keyed(&api, &path, params, &key).await;

        match fields {
            Some(fields) => assert_eq!(named_fields(&reply, &context), *fields, "{context}"),
            None => {
                reply.assert_problem(400);
            }
        }
        let jobs = api.get("/v1/jobs?limit=200").await.json();
        assert_eq!(
            jobs["data"].as_array().map(Vec::len),
            Some(jobs_made),
            "{context}: a job was stored"
        );
        if i % 4 == 0 {
            // The refusal stored no key: a corrected retry with it runs.
            assert_key_unused(&api, &path, &valid(kind), &key, &context).await;
            jobs_made += 1;
        }
    }
}

/// Entries stored for tenant a, read from the store.
async fn entries_stored(env: &TestEnv) -> i64 {
    let store = env.store().await;
    let n = store
        .count_entries("tenant-a", "0000-01-01", "9999-12-31")
        .await
        .expect("count entries");
    store.close().await;
    n
}

async fn ledger_entries_of_the_right_type_that_make_no_sense_are_422_and_store_nothing(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let good = plain("good-1", "2026-10-03", "sale", "1299.00", "18", false);
    let with = |changes: Value| {
        let mut entry = plain("bad-1", "2026-10-04", "purchase", "10.00", "5", true);
        for (field, value) in changes.as_object().expect("changes") {
            entry[field] = value.clone();
        }
        entry
    };
    let long = |n: usize| "x".repeat(n);
    // (the entry beside a valid one, the fields named; none: a 400)
    let cases: Vec<(Value, Option<Vec<&str>>)> = vec![
        (with(json!({"id": ""})), Some(vec!["entries[1].id"])),
        (with(json!({"id": long(65)})), Some(vec!["entries[1].id"])),
        (
            with(json!({"date": "2026-02-30"})),
            Some(vec!["entries[1].date"]),
        ),
        (
            with(json!({"date": "3 Oct 2026"})),
            Some(vec!["entries[1].date"]),
        ),
        (
            with(json!({"direction": "gift"})),
            Some(vec!["entries[1].direction"]),
        ),
        (
            with(json!({"direction": "Sale"})),
            Some(vec!["entries[1].direction"]),
        ),
        (
            with(json!({"amount": "-1.00"})),
            Some(vec!["entries[1].amount"]),
        ),
        (
            with(json!({"amount": "1.005"})),
            Some(vec!["entries[1].amount"]),
        ),
        (
            with(json!({"amount": "1e3"})),
            Some(vec!["entries[1].amount"]),
        ),
        (with(json!({"amount": ""})), Some(vec!["entries[1].amount"])),
        (
            with(json!({"amount": "1000000000.01"})),
            Some(vec!["entries[1].amount"]),
        ),
        (
            with(json!({"gst_rate": "17"})),
            Some(vec!["entries[1].gst_rate"]),
        ),
        (
            with(json!({"gst_rate": "-18"})),
            Some(vec!["entries[1].gst_rate"]),
        ),
        (
            with(json!({"party": long(501)})),
            Some(vec!["entries[1].party"]),
        ),
        (
            with(json!({"description": long(2001)})),
            Some(vec!["entries[1].description"]),
        ),
        (
            with(json!({"party": "a\u{0}b", "description": "\u{0}"})),
            Some(vec!["entries[1].description", "entries[1].party"]),
        ),
        (
            with(json!({"date": "", "amount": "x", "gst_rate": "", "direction": ""})),
            Some(vec![
                "entries[1].amount",
                "entries[1].date",
                "entries[1].direction",
                "entries[1].gst_rate",
            ]),
        ),
        (with(json!({"id": "good-1"})), Some(vec!["entries[1].id"])),
        (with(json!({"amount": 10})), None),
        (with(json!({"gst_rate": 18})), None),
        (with(json!({"interstate": "no"})), None),
        (with(json!({"party": null})), None),
    ];

    for (i, (entry, fields)) in cases.iter().enumerate() {
        let context = format!("{entry}");
        let body = json!({"entries": [good, entry]});
        let key = format!("nonsense-import-{i}");

        let reply = post_keyed(&api, "/v1/ledger/entries", &body, &key).await;

        match fields {
            Some(fields) => assert_eq!(named_fields(&reply, &context), *fields, "{context}"),
            None => {
                reply.assert_problem(400);
            }
        }
        assert_eq!(
            entries_stored(&env).await,
            0,
            "{context}: an entry was stored"
        );
    }
    // A refused import stored nothing against its key.
    assert_key_unused(
        &api,
        "/v1/ledger/entries",
        &json!({"entries": [good]}),
        "nonsense-import-0",
        "the corrected import",
    )
    .await;
    assert_eq!(entries_stored(&env).await, 1);
}

// ------------------------------------------------------- randomized check

/// GST rates in hundredths of a percent, spelt as `docs/api.md` spells them.
const RATES: [(i64, &str); 7] = [
    (0, "0"),
    (25, "0.25"),
    (300, "3"),
    (500, "5"),
    (1200, "12"),
    (1800, "18"),
    (2800, "28"),
];

/// `numerator / denominator` paise, rounded half up (both non-negative).
fn round_half_up(numerator: i64, denominator: i64) -> i64 {
    let (whole, rest) = (numerator / denominator, numerator % denominator);
    if 2 * rest >= denominator {
        whole + 1
    } else {
        whole
    }
}

fn rupees(paise: i64) -> String {
    let sign = if paise < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", paise.abs() / 100, paise.abs() % 100)
}

/// One random entry, kept as the test's own model.
struct Model {
    id: String,
    date: String,
    sale: bool,
    paise: i64,
    rate: usize,
    interstate: bool,
}

impl Model {
    /// (IGST, CGST, SGST) in paise: the rate is in hundredths of a percent,
    /// so a tax is paise x rate / 10,000, and half the rate is / 20,000.
    fn taxes(&self) -> (i64, i64, i64) {
        let product = self.paise * RATES[self.rate].0;
        if self.interstate {
            (round_half_up(product, 10_000), 0, 0)
        } else {
            let half = round_half_up(product, 20_000);
            (0, half, half)
        }
    }

    /// The amount written in one of the ways a client may write it.
    fn amount_text(&self, rng: &mut StdRng) -> String {
        let (whole, fraction) = (self.paise / 100, self.paise % 100);
        match rng.random_range(0..3) {
            0 if fraction == 0 => whole.to_string(),
            1 if fraction % 10 == 0 => format!("{whole}.{}", fraction / 10),
            _ => format!("{whole}.{fraction:02}"),
        }
    }
}

fn random_ledger(rng: &mut StdRng, n: usize) -> Vec<Model> {
    const ID_CHARS: &[u8] = b"ABCXYZabcxyz0123456789-_";
    let mut ids = HashSet::new();
    let start = chrono::NaiveDate::from_ymd_opt(2026, 9, 20).expect("date");
    (0..n)
        .map(|_| {
            let id = loop {
                let len = rng.random_range(1..=12);
                let id: String = (0..len)
                    .map(|_| char::from(ID_CHARS[rng.random_range(0..ID_CHARS.len())]))
                    .collect();
                if ids.insert(id.clone()) {
                    break id;
                }
            };
            let date = start + chrono::Days::new(rng.random_range(0..52));
            // Many small amounts (where half paise happen), some large, and
            // now and then the largest allowed.
            let paise = match rng.random_range(0..10) {
                0..=4 => rng.random_range(0..=500),
                5..=8 => rng.random_range(0..=50_000_000),
                _ => rng.random_range(90_000_000_000..=100_000_000_000),
            };
            Model {
                id,
                date: date.format("%Y-%m-%d").to_string(),
                sale: rng.random_bool(0.6),
                paise,
                rate: rng.random_range(0..RATES.len()),
                interstate: rng.random_bool(0.5),
            }
        })
        .collect()
}

/// The gst-summary of `month` worked out from the model alone.
fn expected_summary(ledger: &[Model], month: &str) -> Value {
    let mut sides: [BTreeMap<i64, [i64; 4]>; 2] = Default::default();
    for e in ledger.iter().filter(|e| e.date.starts_with(month)) {
        let (igst, cgst, sgst) = e.taxes();
        let sums = sides[usize::from(!e.sale)]
            .entry(RATES[e.rate].0)
            .or_default();
        for (sum, add) in sums.iter_mut().zip([e.paise, igst, cgst, sgst]) {
            *sum += add;
        }
    }
    let money = |s: [i64; 4]| json!({"taxable": rupees(s[0]), "igst": rupees(s[1]), "cgst": rupees(s[2]), "sgst": rupees(s[3])});
    let mut totals = [[0i64; 4]; 2];
    let mut sides_json = Vec::new();
    for (side, total) in sides.iter().zip(totals.iter_mut()) {
        let by_rate: Vec<Value> = side
            .iter()
            .map(|(rate, sums)| {
                for (t, s) in total.iter_mut().zip(sums) {
                    *t += s;
                }
                let mut row = money(*sums);
                row["rate"] = json!(RATES.iter().find(|r| r.0 == *rate).expect("rate").1);
                row
            })
            .collect();
        sides_json.push(json!({"by_rate": by_rate, "total": money(*total)}));
    }
    let net: Vec<i64> = (1..4).map(|i| totals[0][i] - totals[1][i]).collect();
    json!({
        "month": month,
        "outward": sides_json[0],
        "inward": sides_json[1],
        "net_payable": {
            "igst": rupees(net[0]), "cgst": rupees(net[1]), "sgst": rupees(net[2]),
            "total": rupees(net.iter().sum()),
        },
    })
}

async fn a_random_ledger_summarises_and_exports_as_worked_out_from_first_principles(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let mut rng = StdRng::seed_from_u64(0x6e57_2026);
    // More than one export page (5,000 rows) in all.
    let ledger = random_ledger(&mut rng, 6_000);
    let entries: Vec<Value> = ledger
        .iter()
        .map(|e| {
            entry(
                &e.id,
                &e.date,
                if e.sale { "sale" } else { "purchase" },
                &e.amount_text(&mut rng),
                RATES[e.rate].1,
                e.interstate,
                "",
                "",
            )
        })
        .collect();
    let imported = import_ok(&api, Value::Array(entries)).await;
    assert_eq!(imported, json!({"inserted": 6_000, "skipped": 0}));

    for month in ["2026-09", "2026-10", "2026-11"] {
        let summary = gst_summary(&api, month).await;

        assert_eq!(summary, expected_summary(&ledger, month), "{month}");
    }

    let export = ledger_export(&api, "2026-09-01", "2026-11-30").await;
    let mut sorted: Vec<&Model> = ledger.iter().collect();
    sorted.sort_by(|a, b| (&a.date, a.id.as_bytes()).cmp(&(&b.date, b.id.as_bytes())));
    let expected: Vec<Value> = sorted
        .iter()
        .map(|e| {
            let (igst, cgst, sgst) = e.taxes();
            json!([
                e.id,
                e.date,
                rupees(e.paise),
                rupees(igst),
                rupees(cgst),
                rupees(sgst)
            ])
        })
        .collect();
    let got: Vec<Value> = export["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            json!([
                e["id"],
                e["date"],
                e["amount"],
                e["igst"],
                e["cgst"],
                e["sgst"]
            ])
        })
        .collect();
    assert_eq!(got.len(), expected.len());
    for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "export row {i}");
    }
}

crate::on_both_backends!(
    repeating_an_import_skips_every_entry,
    a_batch_of_new_and_known_entries_inserts_only_the_new,
    amounts_equal_in_value_are_the_same_content,
    a_known_id_with_other_content_fails_the_whole_batch_and_stores_nothing,
    ten_thousand_entries_are_accepted_and_one_more_is_refused,
    one_id_twice_in_a_batch_with_different_content_is_refused,
    another_tenants_ledger_is_invisible,
    ledger_export_lists_the_range_by_date_then_id_with_each_entrys_taxes,
    ledger_export_answers_csv_with_a_header_row_and_quoting,
    an_empty_ledger_export_in_csv_is_the_header_row_alone,
    gst_summary_is_not_served_as_csv,
    report_parameters_of_the_right_type_that_make_no_sense_are_422_and_store_nothing,
    ledger_entries_of_the_right_type_that_make_no_sense_are_422_and_store_nothing,
    a_random_ledger_summarises_and_exports_as_worked_out_from_first_principles,
);
