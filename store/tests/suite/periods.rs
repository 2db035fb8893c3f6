//! Months locked, closed and reopened, the months that refuse imports, and
//! filing endpoints.

use shared::time::now_ms;
use store::{LockOutcome, Period, ReopenOutcome};

use crate::{harness::TestDb, on_both_databases};

on_both_databases!(
    a_month_is_locked_by_one_job_at_a_time,
    only_its_job_unlocks_a_month_and_only_before_closing_it,
    a_closed_month_keeps_its_reference_until_reopened,
    locked_and_closed_months_refuse_imports,
    locking_a_month_waits_for_its_imports_under_way,
    a_filing_endpoint_keeps_its_secret_when_it_moves,
);

async fn lock(db: &TestDb, tenant_id: &str, month: &str, job_id: &str) -> LockOutcome {
    let mut tx = db.store.begin_write().await.unwrap();
    let outcome = db
        .store
        .lock_period(&mut tx, tenant_id, month, job_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    outcome
}

async fn unlock(db: &TestDb, month: &str, job_id: &str) {
    let mut tx = db.store.begin_write().await.unwrap();
    db.store
        .unlock_period(&mut tx, "acme", month, job_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn set_closed(db: &TestDb, month: &str, job_id: &str, closed: bool, reference: Option<&str>) {
    let mut tx = db.store.begin_write().await.unwrap();
    db.store
        .set_period_closed(&mut tx, "acme", month, job_id, closed, reference)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn reopen(db: &TestDb, month: &str) -> ReopenOutcome {
    let mut tx = db.store.begin_write().await.unwrap();
    let outcome = db
        .store
        .reopen_period(&mut tx, "acme", month, &store::Actor::Command("test"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    outcome
}

async fn period(db: &TestDb, month: &str) -> Option<Period> {
    db.store.get_period("acme", month).await.unwrap()
}

async fn a_month_is_locked_by_one_job_at_a_time(db: &TestDb) {
    assert_eq!(period(db, "2024-02").await, None);
    let before = now_ms();
    assert_eq!(
        lock(db, "acme", "2024-02", "job_1").await,
        LockOutcome::Locked
    );
    let after = now_ms();
    let locked = period(db, "2024-02").await.expect("locked");
    assert_eq!(
        (
            locked.month.as_str(),
            locked.state.as_str(),
            locked.job_id.as_str()
        ),
        ("2024-02", "locked", "job_1")
    );
    assert!((before..=after).contains(&locked.locked_at));
    assert_eq!(
        (locked.closed_at, locked.filing_reference.clone()),
        (None, None)
    );

    // Its own job again (a retried step): still locked, unchanged.
    assert_eq!(
        lock(db, "acme", "2024-02", "job_1").await,
        LockOutcome::Locked
    );
    assert_eq!(period(db, "2024-02").await, Some(locked.clone()));
    // Another job finds it held.
    assert_eq!(
        lock(db, "acme", "2024-02", "job_2").await,
        LockOutcome::Held(locked.clone())
    );
    // Another month, and another tenant's month, are free.
    assert_eq!(
        lock(db, "acme", "2024-03", "job_2").await,
        LockOutcome::Locked
    );
    assert_eq!(
        lock(db, "globex", "2024-02", "job_3").await,
        LockOutcome::Locked
    );
    assert_eq!(period(db, "2024-02").await, Some(locked));
}

async fn only_its_job_unlocks_a_month_and_only_before_closing_it(db: &TestDb) {
    lock(db, "acme", "2024-02", "job_1").await;
    unlock(db, "2024-02", "job_2").await;
    assert_eq!(
        period(db, "2024-02").await.expect("still locked").job_id,
        "job_1"
    );
    unlock(db, "2024-02", "job_1").await;
    assert_eq!(period(db, "2024-02").await, None);

    lock(db, "acme", "2024-02", "job_1").await;
    set_closed(db, "2024-02", "job_1", true, Some("ARN-1")).await;
    unlock(db, "2024-02", "job_1").await;
    assert_eq!(
        period(db, "2024-02").await.expect("still closed").state,
        "closed"
    );
}

async fn a_closed_month_keeps_its_reference_until_reopened(db: &TestDb) {
    lock(db, "acme", "2024-02", "job_1").await;
    // A month being closed cannot be reopened.
    let locked = period(db, "2024-02").await.unwrap();
    assert_eq!(
        reopen(db, "2024-02").await,
        ReopenOutcome::Locked(locked.clone())
    );

    let before = now_ms();
    set_closed(db, "2024-02", "job_1", true, Some("ARN-1")).await;
    let after = now_ms();
    let closed = period(db, "2024-02").await.unwrap();
    assert_eq!(closed.state, "closed");
    assert_eq!(closed.filing_reference.as_deref(), Some("ARN-1"));
    assert!((before..=after).contains(&closed.closed_at.expect("a close time")));
    assert_eq!(closed.locked_at, locked.locked_at);

    // Undoing the close (the record step's compensation) locks it again,
    // without the reference.
    set_closed(db, "2024-02", "job_1", false, Some("ignored")).await;
    assert_eq!(period(db, "2024-02").await, Some(locked));

    // Another job's close changes nothing.
    set_closed(db, "2024-02", "job_2", true, Some("ARN-2")).await;
    assert_eq!(period(db, "2024-02").await.unwrap().state, "locked");

    // Closed without a reference (the receiver gave none).
    set_closed(db, "2024-02", "job_1", true, None).await;
    let closed = period(db, "2024-02").await.unwrap();
    assert_eq!(
        (closed.state.as_str(), closed.filing_reference),
        ("closed", None)
    );

    assert_eq!(reopen(db, "2024-02").await, ReopenOutcome::Open);
    assert_eq!(period(db, "2024-02").await, None);
    // Reopening an open month is not an error.
    assert_eq!(reopen(db, "2024-02").await, ReopenOutcome::Open);
    assert_eq!(
        lock(db, "acme", "2024-02", "job_2").await,
        LockOutcome::Locked
    );
}

async fn locked_and_closed_months_refuse_imports(db: &TestDb) {
    lock(db, "acme", "2024-02", "job_1").await;
    lock(db, "acme", "2024-04", "job_2").await;
    set_closed(db, "2024-04", "job_2", true, Some("ARN-4")).await;
    lock(db, "globex", "2024-03", "job_3").await;

    let refusing = |months: &'static [&'static str]| async move {
        let months: Vec<String> = months.iter().map(|m| (*m).to_owned()).collect();
        let mut tx = db.store.begin_write().await.unwrap();
        let periods = db
            .store
            .periods_refusing_imports(&mut tx, "acme", &months)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        periods
            .into_iter()
            .map(|p| (p.month, p.state, p.job_id))
            .collect::<Vec<_>>()
    };
    let own =
        |month: &str, state: &str, job: &str| (month.to_owned(), state.to_owned(), job.to_owned());

    assert_eq!(
        refusing(&["2024-04", "2024-03", "2024-02", "2024-02", "2024-01"]).await,
        [
            own("2024-02", "locked", "job_1"),
            own("2024-04", "closed", "job_2")
        ]
    );
    // Another tenant's locked month does not refuse this tenant's imports.
    assert!(refusing(&["2024-01", "2024-03"]).await.is_empty());
    assert!(refusing(&[]).await.is_empty());

    // Reopened, the month takes imports again.
    assert_eq!(reopen(db, "2024-04").await, ReopenOutcome::Open);
    assert_eq!(
        refusing(&["2024-04", "2024-02"]).await,
        [own("2024-02", "locked", "job_1")]
    );
}

/// What makes the refusal exact: an import that found its months open
/// holds them until it commits, so a period-close locks the month after
/// the import's entries are in, never between its check and its commit
/// (on Postgres a shared lock per month; on SQLite the one writer).
async fn locking_a_month_waits_for_its_imports_under_way(db: &TestDb) {
    let mut import = db.store.begin_write().await.unwrap();
    let months = ["2024-03".to_owned(), "2024-02".to_owned()];
    assert!(
        db.store
            .periods_refusing_imports(&mut import, "acme", &months)
            .await
            .unwrap()
            .is_empty()
    );

    let store = db.store.clone();
    let close = tokio::spawn(async move {
        let mut tx = store.begin_write().await.unwrap();
        let outcome = store
            .lock_period(&mut tx, "acme", "2024-02", "job_1")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        outcome
    });
    let mut close = std::pin::pin!(close);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(500), &mut close)
            .await
            .is_err(),
        "the month was locked while an import of it was under way"
    );
    // Another tenant's month, or another month, does not wait (Postgres).
    if db.store.dialect() == store::Dialect::Postgres {
        assert_eq!(
            lock(db, "globex", "2024-02", "job_2").await,
            LockOutcome::Locked
        );
        assert_eq!(
            lock(db, "acme", "2024-04", "job_2").await,
            LockOutcome::Locked
        );
    }
    import.commit().await.unwrap();
    assert_eq!(close.await.unwrap(), LockOutcome::Locked);
    assert_eq!(period(db, "2024-02").await.unwrap().job_id, "job_1");
}

async fn a_filing_endpoint_keeps_its_secret_when_it_moves(db: &TestDb) {
    assert_eq!(db.store.get_filing_endpoint("acme").await.unwrap(), None);
    let before = now_ms();
    let first = db
        .store
        .put_filing_endpoint(
            "acme",
            "https://files.example/one",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    assert_eq!(first.url, "https://files.example/one");
    assert!(first.secret.starts_with("whsec_"), "{}", first.secret);
    assert_eq!(first.created_at, first.updated_at);
    assert!(first.created_at >= before);
    assert_eq!(
        db.store.get_filing_endpoint("acme").await.unwrap(),
        Some(first.clone())
    );

    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let moved = db
        .store
        .put_filing_endpoint(
            "acme",
            "https://files.example/two",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    assert_eq!(moved.url, "https://files.example/two");
    assert_eq!(moved.secret, first.secret);
    assert_eq!(moved.created_at, first.created_at);
    assert!(moved.updated_at > first.updated_at);
    assert_eq!(
        db.store.get_filing_endpoint("acme").await.unwrap(),
        Some(moved)
    );

    // Each tenant has its own, with its own secret.
    assert_eq!(db.store.get_filing_endpoint("globex").await.unwrap(), None);
    let other = db
        .store
        .put_filing_endpoint(
            "globex",
            "https://files.example/one",
            &store::Actor::Command("test"),
        )
        .await
        .unwrap();
    assert_ne!(other.secret, first.secret);
}
