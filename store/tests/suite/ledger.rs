//! Ledger imports, the GST aggregate and the export's pages.

use shared::ledger::{Direction, LedgerEntry, tax_of};
use store::{GstRow, ImportOutcome};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    an_import_counts_what_it_inserted_and_skipped,
    a_changed_entry_refuses_the_whole_batch_and_keeps_the_transaction,
    the_gst_rows_of_a_month_are_exact,
    the_export_pages_through_the_range_in_date_then_id_order,
);

const ALL_FROM: &str = "0000-01-01";
const ALL_TO: &str = "9999-12-31";

fn entry(id: &str, date: &str, direction: Direction, amount: i64, rate: i64) -> LedgerEntry {
    LedgerEntry {
        entry_id: id.to_owned(),
        date: date.to_owned(),
        direction,
        amount_paise: amount,
        rate_centi: rate,
        interstate: false,
        party: format!("party of {id}"),
        description: format!("entry {id}"),
    }
}

fn interstate(mut entry: LedgerEntry) -> LedgerEntry {
    entry.interstate = true;
    entry
}

async fn import(db: &TestDb, tenant_id: &str, entries: &[LedgerEntry]) -> ImportOutcome {
    let mut tx = db.store.begin_write().await.unwrap();
    let outcome = db
        .store
        .import_entries(&mut tx, tenant_id, entries)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    outcome
}

/// Every entry of the tenant in `[from, to]`, read page by page as the
/// export reads them.
async fn export(db: &TestDb, tenant_id: &str, from: &str, to: &str, page: i64) -> Vec<LedgerEntry> {
    let mut all = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let entries = db
            .store
            .entries_page(
                tenant_id,
                from,
                to,
                after.as_ref().map(|(d, i)| (d.as_str(), i.as_str())),
                page,
            )
            .await
            .unwrap();
        assert!(entries.len() as i64 <= page);
        let Some(last) = entries.last() else { break };
        after = Some((last.date.clone(), last.entry_id.clone()));
        let full = entries.len() as i64 == page;
        all.extend(entries);
        if !full {
            break;
        }
    }
    all
}

async fn an_import_counts_what_it_inserted_and_skipped(db: &TestDb) {
    let first = vec![
        entry("inv-1", "2024-02-01", Direction::Sale, 10_000, 1800),
        interstate(entry("inv-2", "2024-02-02", Direction::Sale, 25_000, 500)),
        entry("bill-1", "2024-02-03", Direction::Purchase, 7_550, 1200),
    ];
    assert_eq!(
        import(db, "acme", &first).await,
        ImportOutcome::Imported {
            inserted: 3,
            skipped: 0
        }
    );

    // The same entries again, and one new: the known ones are skipped.
    let mut second = first.clone();
    second.push(entry("inv-3", "2024-03-01", Direction::Sale, 1_000, 0));
    assert_eq!(
        import(db, "acme", &second).await,
        ImportOutcome::Imported {
            inserted: 1,
            skipped: 3
        }
    );
    assert_eq!(
        db.store
            .count_entries("acme", ALL_FROM, ALL_TO)
            .await
            .unwrap(),
        4
    );

    // Ids are the tenant's own.
    assert_eq!(
        import(db, "globex", &first).await,
        ImportOutcome::Imported {
            inserted: 3,
            skipped: 0
        }
    );
    assert_eq!(
        db.store
            .count_entries("globex", ALL_FROM, ALL_TO)
            .await
            .unwrap(),
        3
    );

    // What is stored is what was sent, field by field.
    let stored = export(db, "acme", ALL_FROM, ALL_TO, 100).await;
    assert_eq!(stored, second);
}

async fn a_changed_entry_refuses_the_whole_batch_and_keeps_the_transaction(db: &TestDb) {
    let original = entry("inv-1", "2024-02-01", Direction::Sale, 10_000, 1800);
    import(db, "acme", std::slice::from_ref(&original)).await;

    let mut changed = original.clone();
    changed.amount_paise += 1;
    let mut other_change = entry("inv-0", "2024-02-01", Direction::Sale, 500, 1800);
    import(db, "acme", std::slice::from_ref(&other_change)).await;
    other_change.interstate = true;

    let mut tx = db.store.begin_write().await.unwrap();
    let outcome = db
        .store
        .import_entries(
            &mut tx,
            "acme",
            &[
                entry("inv-new", "2024-02-05", Direction::Purchase, 100, 500),
                changed.clone(),
                other_change,
                changed,
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ImportOutcome::Conflict {
            ids: vec!["inv-0".into(), "inv-1".into()]
        }
    );
    // The caller's transaction goes on (it records the 409): a later import
    // in it commits, and the refused batch left nothing.
    let later = entry("inv-later", "2024-02-06", Direction::Sale, 200, 300);
    let outcome = db
        .store
        .import_entries(&mut tx, "acme", std::slice::from_ref(&later))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ImportOutcome::Imported {
            inserted: 1,
            skipped: 0
        }
    );
    tx.commit().await.unwrap();

    let stored = export(db, "acme", ALL_FROM, ALL_TO, 100).await;
    let ids: Vec<&str> = stored.iter().map(|e| e.entry_id.as_str()).collect();
    assert_eq!(ids, ["inv-0", "inv-1", "inv-later"]);
    assert_eq!(stored[1], original, "the stored entry is unchanged");
    assert!(!stored[0].interstate);
}

async fn the_gst_rows_of_a_month_are_exact(db: &TestDb) {
    let february = vec![
        // 12345 × 18% = 2222.1 paise of IGST.
        interstate(entry("s-1800", "2024-02-01", Direction::Sale, 12345, 1800)),
        // Half of 5% each: 2.475 and 2.525 paise, rounded per entry to 2
        // and 3; 0.5 and 0.5, rounded up to 1 each (summed first they
        // would make 1, not 2).
        entry("s-500-a", "2024-02-10", Direction::Sale, 99, 500),
        entry("s-500-b", "2024-02-15", Direction::Sale, 101, 500),
        entry("s-500-c", "2024-02-16", Direction::Sale, 20, 500),
        entry("s-500-d", "2024-02-17", Direction::Sale, 20, 500),
        // 250 × 0.25% = 0.625 paise of IGST: 1.
        interstate(entry("s-25", "2024-02-29", Direction::Sale, 250, 25)),
        interstate(entry(
            "p-1200",
            "2024-02-29",
            Direction::Purchase,
            5000,
            1200,
        )),
    ];
    let outside = vec![
        entry("jan", "2024-01-31", Direction::Sale, 100_000, 1800),
        entry("mar", "2024-03-01", Direction::Purchase, 100_000, 1800),
    ];
    import(db, "acme", &[february.clone(), outside].concat()).await;
    import(
        db,
        "globex",
        &[entry(
            "s-500-a",
            "2024-02-10",
            Direction::Sale,
            1_000_000,
            500,
        )],
    )
    .await;

    let rows = db
        .store
        .gst_rows("acme", "2024-02-01", "2024-02-29")
        .await
        .unwrap();
    let row = |direction, rate_centi, taxable, igst, cgst| GstRow {
        direction,
        rate_centi,
        taxable,
        igst,
        cgst,
        sgst: cgst,
    };
    assert_eq!(
        rows,
        [
            row(Direction::Purchase, 1200, 5000, 600, 0),
            row(Direction::Sale, 25, 250, 1, 0),
            row(Direction::Sale, 500, 240, 0, 7),
            row(Direction::Sale, 1800, 12345, 2222, 0),
        ]
    );
    // The same as the per-entry rule of `shared::ledger`.
    for row in &rows {
        let (mut igst, mut cgst, mut sgst) = (0, 0, 0);
        for e in february
            .iter()
            .filter(|e| e.direction == row.direction && e.rate_centi == row.rate_centi)
        {
            let tax = tax_of(e.amount_paise, e.rate_centi, e.interstate);
            (igst, cgst, sgst) = (igst + tax.igst, cgst + tax.cgst, sgst + tax.sgst);
        }
        assert_eq!((row.igst, row.cgst, row.sgst), (igst, cgst, sgst));
    }
    assert_eq!(
        db.store
            .count_entries("acme", "2024-02-01", "2024-02-29")
            .await
            .unwrap(),
        7
    );
    assert!(
        db.store
            .gst_rows("acme", "2024-04-01", "2024-04-30")
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_export_pages_through_the_range_in_date_then_id_order(db: &TestDb) {
    let entries = vec![
        entry("c", "2024-02-10", Direction::Sale, 1, 0),
        entry("a", "2024-02-10", Direction::Sale, 1, 0),
        entry("z", "2024-02-01", Direction::Sale, 1, 0),
        entry("b", "2024-02-10", Direction::Sale, 1, 0),
        entry("y", "2024-02-29", Direction::Purchase, 1, 0),
        entry("before", "2024-01-31", Direction::Sale, 1, 0),
        entry("after", "2024-03-01", Direction::Sale, 1, 0),
        entry("m", "2024-02-20", Direction::Sale, 1, 0),
    ];
    import(db, "acme", &entries).await;
    import(db, "globex", &entries).await;

    for page in [1, 2, 3, 100] {
        let exported = export(db, "acme", "2024-02-01", "2024-02-29", page).await;
        let keys: Vec<(&str, &str)> = exported
            .iter()
            .map(|e| (e.date.as_str(), e.entry_id.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("2024-02-01", "z"),
                ("2024-02-10", "a"),
                ("2024-02-10", "b"),
                ("2024-02-10", "c"),
                ("2024-02-20", "m"),
                ("2024-02-29", "y"),
            ],
            "pages of {page}"
        );
    }
    assert_eq!(
        db.store
            .count_entries("acme", "2024-02-01", "2024-02-29")
            .await
            .unwrap(),
        6
    );
    // A range of one day.
    let day = export(db, "acme", "2024-02-10", "2024-02-10", 2).await;
    assert_eq!(day.len(), 3);
}
