//! One harness for exercising Receipt from outside, shared by the
//! integration tests, the bench and the soak: a private database and Redis
//! prefix per test ([`TestEnv`]), the real `api` and `worker` binaries
//! started on it ([`Process`]), an HTTP client of the api ([`Api`]),
//! receivers of the test's own on loopback (one that records each
//! job's announcements: [`Announcements`]), Postgres, PgBouncer, Redis and
//! Sentinel servers of a run's own ([`servers`]), a network between a
//! process and a server that misbehaves on cue ([`proxy`]), a process whose
//! clock is wrong ([`clock`]), tools installed from
//! package registries ([`tools`]), a small volume to fill ([`volume`]),
//! and waiting for events with a deadline
//! ([`wait`]). It talks HTTP and SQL only: it depends on
//! no crate of the workspace.

pub mod announcements;
pub mod client;
pub mod clock;
pub mod env;
pub mod ledger;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod servers;
pub mod tenants;
pub mod tools;
pub mod volume;
pub mod wait;

pub use announcements::{Announcement, Announcements};
pub use client::{Api, Reply, is_final};
pub use env::{
    Backend, PG_ADMIN_URL, REDIS_URL, TestEnv, admin_sql, count_at, execute_at, new_master_key,
    redis_at, test_settings, through_pgbouncer,
};
pub use process::{
    Finished, PREVIOUS_RELEASE, Process, Stderr, binary, peak_rss_bytes, peak_rss_mib,
    previous_release_binary,
};
pub use proxy::{Fault, FaultProxy, Way};
pub use receiver::{headers_of, serve_on_loopback};
pub use tenants::{KEY_A, KEY_B};
pub use wait::Record;
