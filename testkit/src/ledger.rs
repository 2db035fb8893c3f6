//! Ledgers the tests import: one entry as a client writes it, and a month
//! whose every tax is worked out by hand.

use serde_json::{Value, json};

/// An entry as a client writes it, whose party and description do not
/// matter to the test.
pub fn plain(
    id: &str,
    date: &str,
    direction: &str,
    amount: &str,
    gst_rate: &str,
    interstate: bool,
) -> Value {
    json!({
        "id": id, "date": date, "direction": direction, "amount": amount,
        "gst_rate": gst_rate, "interstate": interstate,
    })
}

/// October 2026 and its neighbours. Each tax is worked out by hand in the
/// comment beside its entry; amounts of 0.25, 0.50, 1.00, 2.00 and 4.00 put
/// taxes exactly on half a paisa, which must round up, per entry.
pub fn hand_worked_ledger() -> Value {
    json!([
        // Outward, October.
        //   rate 0: no tax.
        plain("o-0", "2026-10-15", "sale", "1000.00", "0", false),
        //   rate 0.25: 0.125% of 4.00 = 0.005 -> 0.01 CGST and SGST;
        //   0.25% of 2.00 = 0.005 -> 0.01 IGST.
        plain("o-025-intra", "2026-10-20", "sale", "4.00", "0.25", false),
        plain("o-025-inter", "2026-10-21", "sale", "2", "0.25", true),
        //   rate 5: 2.5% of 1.00 = 0.025 -> 0.03 each; 5% of 0.50 = 0.025 -> 0.03.
        plain("o-5-intra", "2026-10-10", "sale", "1.00", "5", false),
        plain("o-5-inter", "2026-10-12", "sale", "0.50", "5", true),
        //   rate 12: 6% of 0.25 = 0.015 -> 0.02 each; 12% of 100.00 = 12.00.
        plain("o-12-intra", "2026-10-13", "sale", "0.25", "12", false),
        plain("o-12-inter", "2026-10-14", "sale", "100.00", "12", true),
        //   rate 18: 18% of 0.25 = 0.045 -> 0.05, twice (0.10 in all, where
        //   rounding the sum would give 0.09); 9% of 0.25 = 0.0225 -> 0.02
        //   each; 9% of 1299.50 = 116.955 -> 116.96 each.
        plain("o-18-inter-a", "2026-10-01", "sale", "0.25", "18", true),
        plain("o-18-inter-b", "2026-10-01", "sale", "0.25", "18", true),
        plain("o-18-intra", "2026-10-05", "sale", "0.25", "18", false),
        plain("o-18-big", "2026-10-31", "sale", "1299.5", "18", false),
        // Inward, October.
        //   rate 5: 2.5% of 1.00 = 0.025 -> 0.03 each.
        plain("i-5-intra", "2026-10-02", "purchase", "1.00", "5", false),
        //   rate 18: 18% of 0.25 = 0.045 -> 0.05; 18% of 500.00 = 90.00.
        plain("i-18-inter", "2026-10-03", "purchase", "0.25", "18", true),
        plain("i-18-big", "2026-10-04", "purchase", "500.00", "18", true),
        //   rate 28: 14% of 0.25 = 0.035 -> 0.04 each; 28% of 10.00 = 2.80.
        plain("i-28-intra", "2026-10-06", "purchase", "0.25", "28", false),
        plain("i-28-inter", "2026-10-07", "purchase", "10.00", "28", true),
        // Neighbours that October must not count; their rates (3, 28 on the
        // outward side) would show up in October's by_rate if they leaked.
        plain("n-sep-3", "2026-09-30", "sale", "50.00", "3", true),
        plain("n-sep-28", "2026-09-01", "sale", "1.00", "28", false),
        plain("n-last-year", "2025-10-15", "sale", "100.00", "18", true),
        // November: 14% of 20.00 = 2.80 CGST and SGST, inward only.
        plain("n-nov-28", "2026-11-01", "purchase", "20.00", "28", false),
    ])
}
