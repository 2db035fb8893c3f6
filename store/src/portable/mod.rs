//! Statements whose text and binds are the same on Postgres and SQLite,
//! written once. Each file here is compiled twice, as
//! `portable::postgres::<area>` and `portable::sqlite::<area>`, where
//! `Db` and `Conn` (from `super`) name that database and its connection,
//! so one function body serves both; each database's module
//! (`crate::postgres::<area>`, `crate::sqlite::<area>`) re-exports its
//! half beside the statements that differ. `tests/statements.rs` prepares
//! every `sql!` here on both databases.

/// Declares the areas, each file once more; invoked by `postgres.rs` and
/// `sqlite.rs`, beside which the files are found.
macro_rules! areas {
    () => {
        #[path = "attempts.rs"]
        pub(crate) mod attempts;
        #[path = "audit.rs"]
        pub(crate) mod audit;
        #[path = "dashboard.rs"]
        pub(crate) mod dashboard;
        #[path = "gauges.rs"]
        pub(crate) mod gauges;
        #[path = "idempotency.rs"]
        pub(crate) mod idempotency;
        #[path = "jobs.rs"]
        pub(crate) mod jobs;
        #[path = "keys.rs"]
        pub(crate) mod keys;
        #[path = "kinds.rs"]
        pub(crate) mod kinds;
        #[path = "outbox.rs"]
        pub(crate) mod outbox;
        #[path = "periods.rs"]
        pub(crate) mod periods;
        #[path = "results.rs"]
        pub(crate) mod results;
        #[path = "sagas.rs"]
        pub(crate) mod sagas;
        #[path = "schedules.rs"]
        pub(crate) mod schedules;
        #[path = "secrets.rs"]
        pub(crate) mod secrets;
        #[path = "session.rs"]
        pub(crate) mod session;
        #[path = "webhooks.rs"]
        pub(crate) mod webhooks;
        #[path = "work.rs"]
        pub(crate) mod work;
    };
}

// Each area file is a module of both on purpose: that is how a statement
// is written once.
#[allow(clippy::duplicate_mod)]
pub(crate) mod postgres;
#[allow(clippy::duplicate_mod)]
pub(crate) mod sqlite;
