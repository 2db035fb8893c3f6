//! One integration-test binary (one link, shared by every suite). Each
//! suite is a module; `on_both_backends!` runs a scenario on the embedded
//! SQLite default and on Postgres + Redis.

mod common;
mod errors;
mod exactly_once;
mod idempotency;
mod lifecycle;
mod reports;
mod retention;
mod scale;
mod webhooks;
mod worker_behaviour;
