//! A month of a million ledger entries: the GST summary still sums exactly
//! (integer paise, per-entry rounding, no overflow) on both databases.

use serde_json::{Value, json};

use crate::common::{Backend, TestEnv, date_sql, moment_sql};

const ENTRIES: i64 = 1_000_000;
const RATES: [i64; 7] = [0, 25, 300, 500, 1200, 1800, 2800];

/// Entry `i` of the generated month, as the SQL below writes it.
fn entry(i: i64) -> (bool, i64, i64, bool) {
    let sale = i % 2 == 0;
    // Up to the largest amount an entry may carry (1,000,000,000.00).
    let amount = (i * 7_919 * 104_729) % 100_000_000_001;
    (sale, amount, RATES[(i % 7) as usize], i % 3 == 0)
}

fn rupees(paise: i128) -> String {
    let sign = if paise < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", paise.abs() / 100, paise.abs() % 100)
}

/// The expected summary, worked out here with 128-bit integers.
fn expected() -> Value {
    // [direction][rate] -> (taxable, igst, cgst)
    let mut sums = [[(0i128, 0i128, 0i128); 7]; 2];
    for i in 0..ENTRIES {
        let (sale, amount, rate, interstate) = entry(i);
        let slot = &mut sums[usize::from(!sale)][RATES.iter().position(|r| *r == rate).unwrap()];
        let base = i128::from(amount) * i128::from(rate);
        slot.0 += i128::from(amount);
        if interstate {
            slot.1 += (base * 2 + 10_000) / 20_000;
        } else {
            slot.2 += (base + 10_000) / 20_000;
        }
    }
    let side = |d: usize| {
        let rows: Vec<Value> = (0..7)
            .filter(|r| sums[d][*r].0 > 0)
            .map(|r| {
                let (t, i, c) = sums[d][r];
                let rate = RATES[r];
                let rate = if rate % 100 == 0 { (rate / 100).to_string() } else { format!("0.{rate}") };
                json!({"rate": rate, "taxable": rupees(t), "igst": rupees(i), "cgst": rupees(c), "sgst": rupees(c)})
            })
            .collect();
        let total = sums[d]
            .iter()
            .fold((0, 0, 0), |a, s| (a.0 + s.0, a.1 + s.1, a.2 + s.2));
        (rows, total)
    };
    let (out_rows, out) = side(0);
    let (in_rows, inn) = side(1);
    let (igst, cgst) = (out.1 - inn.1, out.2 - inn.2);
    json!({
        "month": "2026-10",
        "outward": {"by_rate": out_rows, "total": {"taxable": rupees(out.0), "igst": rupees(out.1), "cgst": rupees(out.2), "sgst": rupees(out.2)}},
        "inward": {"by_rate": in_rows, "total": {"taxable": rupees(inn.0), "igst": rupees(inn.1), "cgst": rupees(inn.2), "sgst": rupees(inn.2)}},
        "net_payable": {"igst": rupees(igst), "cgst": rupees(cgst), "sgst": rupees(cgst), "total": rupees(igst + 2 * cgst)},
    })
}

async fn a_month_of_a_million_entries_sums_exactly(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    // Written straight into the table: importing a million entries over
    // HTTP would test the import, not the report.
    let columns = "tenant_id, entry_id, entry_date, direction, amount_paise, rate_centi, interstate, party, description, created_at";
    let date = date_sql(
        backend,
        "'2026-10-' || CASE WHEN 1 + i % 31 < 10 THEN '0' ELSE '' END || (1 + i % 31)",
    );
    let created = moment_sql(backend, "0");
    let values = format!("'tenant-a', 'm-' || i, {date},
         CASE WHEN i % 2 = 0 THEN 'sale' ELSE 'purchase' END,
         (i * 7919 * 104729) % 100000000001,
         CASE i % 7 WHEN 0 THEN 0 WHEN 1 THEN 25 WHEN 2 THEN 300 WHEN 3 THEN 500 WHEN 4 THEN 1200 WHEN 5 THEN 1800 ELSE 2800 END,
         i % 3 = 0, '', '', {created}");
    // In chunks, so no statement holds SQLite's write lock for long.
    const CHUNK: i64 = 100_000;
    for start in (0..ENTRIES).step_by(CHUNK as usize) {
        let end = start + CHUNK - 1;
        let sql = match backend {
            Backend::PgRedis => format!(
                "INSERT INTO ledger_entries ({columns}) SELECT {values} FROM generate_series({start}::bigint, {end}) AS s(i)"
            ),
            Backend::Sqlite => format!(
                "WITH RECURSIVE s(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM s WHERE i < {end})
                 INSERT INTO ledger_entries ({columns}) SELECT {values} FROM s"
            ),
        };
        env.execute_sql(&sql).await;
    }
    // Neighbouring months stay out.
    api.import(json!([
        {"id": "sep", "date": "2026-09-30", "direction": "sale", "amount": "999.99", "gst_rate": "28"},
        {"id": "nov", "date": "2026-11-01", "direction": "purchase", "amount": "999.99", "gst_rate": "28"},
    ]))
    .await;

    let job = api.submit("gst-summary", json!({"month": "2026-10"})).await;
    let job_id = job["job_id"].as_str().unwrap();
    assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(result, expected());
}

crate::on_both_backends!(a_month_of_a_million_entries_sums_exactly);
