//! The sessions a store opens on Postgres bound what a silent or stuck
//! peer can hold: statements, transactions left idle, and quiet
//! connections (docs/operations.md, Timeouts).

use crate::harness::TestDb;

#[tokio::test]
async fn postgres_sessions_bound_statements_idle_transactions_and_quiet_connections() {
    let db = TestDb::postgres().await;
    for (setting, expected) in [
        ("statement_timeout", "1min"),
        ("idle_in_transaction_session_timeout", "1min"),
        ("tcp_keepalives_idle", "30"),
        ("tcp_keepalives_interval", "10"),
        ("tcp_keepalives_count", "3"),
    ] {
        let shown = db.store.session_setting(setting).await.expect("SHOW");
        assert_eq!(shown.as_deref(), Some(expected), "{setting}");
    }
    db.finish().await;
}
