//! Bad input costs nothing and bends no guarantee: a date or month that is
//! not written exactly `YYYY-MM-DD` / `YYYY-MM` is refused by every reader
//! (bodies, paths, report parameters) with a problem and changes nothing,
//! and a ledger import's memory is bounded by what it keeps, not by how
//! many values its body holds.

use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{HttpResponse, web};
use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Api, Backend, Reply, TestEnv, serve_on_loopback};

const MIB: u64 = 1024 * 1024;

fn entry(id: &str, date: &str) -> Value {
    json!({"id": id, "date": date, "direction": "sale", "amount": "1000.00",
           "gst_rate": "18", "interstate": false})
}

/// A filing endpoint that takes every filing, counting them.
async fn file(filings: web::Data<AtomicUsize>) -> HttpResponse {
    let n = filings.fetch_add(1, Ordering::SeqCst) + 1;
    HttpResponse::Ok().json(json!({"reference": format!("ref-{n}")}))
}

/// Every byte but the unreserved ones percent-encoded, so any text
/// reaches the server as one path segment.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Malformed dates as clients send them: the reported ones, then `n`
/// generated from real dates (spaces of every kind, signs, one-digit
/// fields, five-digit years, trailing text, non-ASCII digits, days that
/// are not in the calendar).
fn malformed_dates(rng: &mut StdRng, n: usize) -> Vec<String> {
    let mut dates: Vec<String> = [
        "2026- 1-25",
        "+999-12-31",
        "-001-01-01",
        "226-1-\u{2007}5",
        "2026-\u{a0}1-5",
        "2026-01-2\u{3000}",
        "2026-02-30",
        "2026-02-29",
        "2026-04-31",
        "2026-13-01",
        "2026-00-01",
        "2026-01-00",
        "٢٠٢٦-01-25",
        "20260125",
        "2026-01-25T00:00:00Z",
        "",
    ]
    .map(str::to_owned)
    .to_vec();
    const SPACES: [&str; 6] = [" ", "\t", "\u{a0}", "\u{2007}", "\u{3000}", "\u{202f}"];
    const DIGITS: [&str; 4] = ["٢", "۲", "२", "２"];
    while dates.len() < n {
        let (y, m, d) = (
            rng.random_range(1000..=9999),
            rng.random_range(1..=12),
            rng.random_range(1..=28),
        );
        let canonical = format!("{y:04}-{m:02}-{d:02}");
        let at = rng.random_range(0..canonical.len());
        let bad = match rng.random_range(0..8) {
            0 => format!(
                "{}{}{}",
                &canonical[..at],
                SPACES[rng.random_range(0..SPACES.len())],
                &canonical[at..]
            ),
            1 => format!("{}{canonical}", ["+", "-"][rng.random_range(0..2)]),
            2 => format!("{y}-{m}-{d}"),
            3 => format!("{:05}-{m:02}-{d:02}", y + 10_000 * rng.random_range(0..9)),
            4 => format!(
                "{canonical}{}",
                ["x", " ", "0", "\n", "Z"][rng.random_range(0..5)]
            ),
            5 => {
                let digit = canonical
                    .char_indices()
                    .filter(|(_, c)| c.is_ascii_digit())
                    .nth(rng.random_range(0..8))
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                format!(
                    "{}{}{}",
                    &canonical[..digit],
                    DIGITS[rng.random_range(0..DIGITS.len())],
                    &canonical[digit + 1..]
                )
            }
            6 => format!("{y:04}-02-{}", [30, 31, 32, 99][rng.random_range(0..4)]),
            _ => {
                format!(
                    "{}{}",
                    &canonical[..at],
                    SPACES[rng.random_range(0..SPACES.len())]
                ) + &canonical[at + 1..]
            }
        };
        // A mutation that happened to write a real date is no case.
        if shared::calendar::Date::parse(&bad).is_none() {
            dates.push(bad);
        }
    }
    dates
}

/// The same damage done to months: `"2026- 1"`, `"+999-12"`, ...
fn malformed_months(dates: &[String]) -> Vec<String> {
    let mut months: Vec<String> = ["2026- 1", "+999-12", "-001-01", "2026-1", "02026-01"]
        .map(str::to_owned)
        .to_vec();
    for date in dates {
        // The first seven characters, or the whole text when it is a
        // month's length: damage kept, day dropped.
        let month: String = date.chars().take(7).collect();
        if shared::calendar::Month::parse(&month).is_none() {
            months.push(month);
        }
    }
    months.push("2026-01-01".into());
    months.push("2026-13".into());
    months
}

/// A 4xx problem; for a 422, one that names `field`.
fn assert_refused(reply: &Reply, field: &str, context: &str) {
    assert!(
        reply.status.is_client_error(),
        "{context}: {} {}",
        reply.status,
        reply.text
    );
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "{context}: {}",
        reply.text
    );
    let problem = reply.json();
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{context}: {problem}"
    );
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{context}: no errors in {problem}"))
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert!(
        fields.contains(&field),
        "{context}: {field} not in {problem}"
    );
}

/// What a refused request could have changed.
async fn footprint(env: &TestEnv, filings: &AtomicUsize) -> (i64, i64, i64, usize) {
    (
        env.count("SELECT COUNT(*) FROM ledger_entries").await,
        env.count("SELECT COUNT(*) FROM jobs").await,
        env.count("SELECT COUNT(*) FROM periods").await,
        filings.load(Ordering::SeqCst),
    )
}

async fn malformed_dates_and_months_are_refused_by_every_reader_and_change_nothing(
    backend: Backend,
) {
    // Arrange: January imported and closed, its return filed once.
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xDA7E_2026);
    println!("fuzz seed {seed} (rerun with FUZZ_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let filings = web::Data::new(AtomicUsize::new(0));
    let (addr, receiver) = serve_on_loopback(filings.clone(), file);
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded_with_local_receivers().await;
    let reply = api.import(json!([entry("jan-1", "2026-01-10")])).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let url = format!("http://{addr}/returns");
    let reply = api
        .send(
            Method::PUT,
            "/v1/filing-endpoint",
            Some(&json!({"url": url})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let close = api
        .submit("period-close", json!({"month": "2026-01"}))
        .await;
    let closed = api.wait_final(close["job_id"].as_str().unwrap()).await;
    assert_eq!(closed["status"], "SUCCEEDED", "{closed}");
    let before = footprint(&env, &filings).await;
    assert_eq!(before.3, 1, "January filed once");

    // Act and assert: the reported reproduction.
    let canonical = api.import(json!([entry("jan-25", "2026-01-25")])).await;
    assert_eq!(canonical.status, StatusCode::CONFLICT, "{}", canonical.text);
    for date in ["2026- 1-25", "226-1-\u{2007}5", "2026-\u{a0}1-5"] {
        let reply = api.import(json!([entry("jan-25", date)])).await;
        assert_refused(&reply, "entries[0].date", &format!("import {date:?}"));
    }
    let reply = api
        .post("/v1/reports/period-close", &json!({"month": "2026- 1"}))
        .await;
    assert_refused(&reply, "month", "period-close \"2026- 1\"");
    let reply = api.get("/v1/periods/2026-%201").await;
    assert_refused(&reply, "month", "GET /v1/periods/2026-%201");
    let summary = api.submit("gst-summary", json!({"month": "2026-01"})).await;
    let summary = api.wait_final(summary["job_id"].as_str().unwrap()).await;
    let result = api
        .get(&format!(
            "/v1/jobs/{}/result",
            summary["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        result.json()["outward"]["total"]["taxable"],
        "1000.00",
        "January holds its one entry: {}",
        result.text
    );
    let before = footprint(&env, &filings).await;

    // Act and assert: generated dates and months at every reader.
    let dates = malformed_dates(&mut rng, 120);
    let months = malformed_months(&dates);
    for date in &dates {
        let context = format!("date {date:?}");
        let reply = api.import(json!([entry("gen", date)])).await;
        assert_refused(&reply, "entries[0].date", &format!("import, {context}"));
        let reply = api
            .import(json!([entry("ok", "2026-03-01"), entry("gen", date)]))
            .await;
        assert_refused(
            &reply,
            "entries[1].date",
            &format!("import of two, {context}"),
        );
        for (params, field) in [
            (json!({"from": date, "to": "2026-12-31"}), "from"),
            (json!({"from": "2026-01-01", "to": date}), "to"),
        ] {
            let reply = api.post("/v1/reports/ledger-export", &params).await;
            assert_refused(&reply, field, &format!("ledger-export {field}, {context}"));
        }
    }
    for month in &months {
        let context = format!("month {month:?}");
        for kind in ["gst-summary", "period-close"] {
            let reply = api
                .post(&format!("/v1/reports/{kind}"), &json!({"month": month}))
                .await;
            assert_refused(&reply, "month", &format!("{kind}, {context}"));
        }
        if month.is_empty() {
            continue;
        }
        let segment = path_segment(month);
        let reply = api.get(&format!("/v1/periods/{segment}")).await;
        assert_refused(&reply, "month", &format!("GET period, {context}"));
        let reply = api
            .post(&format!("/v1/periods/{segment}/reopen"), &json!({}))
            .await;
        assert_refused(&reply, "month", &format!("reopen, {context}"));
    }

    // Assert: nothing was stored, queued, locked, reopened or filed.
    assert_eq!(footprint(&env, &filings).await, before);
    let period = api.get("/v1/periods/2026-01").await;
    assert_eq!(period.json()["state"], "closed", "{}", period.text);
    receiver.stop(true).await;
}

crate::on_both_backends!(malformed_dates_and_months_are_refused_by_every_reader_and_change_nothing);

// ----------------------------------------------------------------- memory

/// A body of `len` bytes: `head`, then `item` repeated (comma separated),
/// then `tail`.
fn repeated_body(head: &str, item: &str, tail: &str, len: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(len);
    body.extend_from_slice(head.as_bytes());
    let mut first = true;
    while body.len() + item.len() + 1 + tail.len() <= len {
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(item.as_bytes());
    }
    body.extend_from_slice(tail.as_bytes());
    body
}

/// 10,000 valid entries (the most one import may carry) of about 16 MiB.
fn largest_valid_import() -> Vec<u8> {
    let description = "d".repeat(1_500);
    let entries: Vec<Value> = (0..10_000)
        .map(|i| {
            let mut entry = entry(&format!("big-{i}"), "2026-03-01");
            entry["description"] = json!(description);
            entry
        })
        .collect();
    json!({ "entries": entries }).to_string().into_bytes()
}

async fn post_body(api: &Api, body: Vec<u8>) -> Reply {
    let request = api
        .client
        .post(api.url("/v1/ledger/entries"))
        .bearer_auth(&api.key)
        .header("content-type", "application/json")
        .body(body);
    Api::read(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_16_mib_import_of_many_small_values_costs_bounded_memory() {
    // Arrange: the api alone, warmed up by one import.
    let env = TestEnv::new(Backend::Sqlite).await;
    let mut api = env.start_api(&[]).await;
    let reply = api.import(json!([entry("warm", "2026-02-01")])).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let process = api.process.take().expect("the api process");
    let baseline = process.peak_rss_bytes();
    let limit = 16 * MIB as usize;
    let invalid = r#"{"id":"","date":"2026- 1-25","direction":"x","amount":"x","gst_rate":"x"}"#;
    let bodies: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "objects of one key",
            repeated_body(r#"{"entries":["#, r#"{"a":0}"#, "]}", limit),
            400,
        ),
        (
            "empty objects",
            repeated_body(r#"{"entries":["#, "{}", "]}", limit),
            400,
        ),
        (
            "keys of the body",
            repeated_body("{", r#""a":0"#, "}", limit),
            400,
        ),
        (
            "invalid entries",
            repeated_body(r#"{"entries":["#, invalid, "]}", limit),
            422,
        ),
        ("the largest valid import", largest_valid_import(), 200),
    ];

    // Act and assert: one at a time, each costs a bounded amount.
    for (what, body, status) in &bodies {
        assert!(body.len() <= limit, "{what}: {} bytes", body.len());
        let reply = post_body(&api, body.clone()).await;
        assert_eq!(
            reply.status.as_u16(),
            *status,
            "{what}: {}",
            preview(&reply.text)
        );
        let grown = process.peak_rss_bytes().saturating_sub(baseline);
        println!("{what}: peak RSS grew {} MiB", grown / MIB);
        assert!(
            grown < 128 * MIB,
            "{what}: a 16 MiB body took the api's peak RSS up {} MiB",
            grown / MIB
        );
    }

    // Act: four of the heaviest at once.
    let body = &bodies[3].1;
    let sends = (0..4).map(|_| post_body(&api, body.clone()));
    for reply in futures::future::join_all(sends).await {
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    }

    // Assert: the api lives on and answers.
    assert!(process.exited().is_none(), "the api process died");
    let health = api.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
    let grown = process.peak_rss_bytes().saturating_sub(baseline);
    println!("four at once: peak RSS grew {} MiB", grown / MIB);
    assert!(
        grown < 4 * 128 * MIB,
        "four bodies took {} MiB",
        grown / MIB
    );
}

fn preview(text: &str) -> String {
    text.chars().take(300).collect()
}
