//! The store's behaviour, tested at the store: every test runs on a fresh
//! Postgres database and on a fresh SQLite file (River's driver suite is
//! the model), so both databases' statements keep one behaviour.

mod harness;
mod rows;

mod audit;
mod caps;
mod dashboard;
mod gauges;
mod job_rows;
mod jobs;
mod keys;
mod ledger;
mod lifecycle;
mod migrations;
mod outbox;
mod periods;
mod retention;
mod sagas;
mod secrets;
mod sessions;
mod webhooks;
mod work;
