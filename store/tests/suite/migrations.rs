//! A database migrated by a release whose migrations were numbered by days
//! after the one they were written migrates on: its record of them is
//! moved to their present numbers.

use crate::harness::TestDb;

/// The numbers the release before gave the migrations now numbered
/// `20261205000090` to `20261205000170`.
const AS_THE_RELEASE_BEFORE_NUMBERED_THEM: &str = "UPDATE receipt_migrations SET version = \
     CASE version \
       WHEN 20261205000090 THEN 20261206000090 \
       WHEN 20261205000100 THEN 20261207000100 \
       WHEN 20261205000110 THEN 20261208000110 \
       WHEN 20261205000120 THEN 20261208000120 \
       WHEN 20261205000130 THEN 20261208000130 \
       WHEN 20261205000140 THEN 20261208000140 \
       WHEN 20261205000150 THEN 20261209000150 \
       WHEN 20261205000160 THEN 20261210000160 \
       WHEN 20261205000170 THEN 20261211000170 \
       ELSE version END";

/// The migrations under the numbers the release before gave them.
const NUMBERED_AFTER_THE_DAY: &str = "SELECT count(*) FROM receipt_migrations WHERE version IN \
     (20261206000090, 20261207000100, 20261208000110, 20261208000120, 20261208000130, \
      20261208000140, 20261209000150, 20261210000160, 20261211000170)";

async fn a_database_that_applied_renumbered_migrations_migrates_on(db: &TestDb) {
    db.execute_past_the_store(AS_THE_RELEASE_BEFORE_NUMBERED_THEM)
        .await;
    let before = db.count_past_the_store(NUMBERED_AFTER_THE_DAY).await;
    assert!(before > 0, "the release before's numbers are in place");
    let applied = db
        .count_past_the_store("SELECT count(*) FROM receipt_migrations")
        .await;

    db.store.migrate().await.expect("the migrations run on");
    db.store.migrate().await.expect("and again");

    assert_eq!(db.count_past_the_store(NUMBERED_AFTER_THE_DAY).await, 0);
    assert_eq!(
        db.count_past_the_store("SELECT count(*) FROM receipt_migrations")
            .await,
        applied,
        "nothing was applied twice"
    );
}

crate::on_both_databases!(a_database_that_applied_renumbered_migrations_migrates_on);
