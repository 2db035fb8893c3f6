//! One integration-test binary (one link, shared by every suite). Each
//! suite is a module; `on_both_backends!` runs a scenario on the embedded
//! SQLite default and on Postgres + Redis.

mod api_keys;
mod audit;
mod big_results;
mod clock;
mod common;
mod dashboard;
mod dashboard_browser;
mod delayed;
mod deploy;
mod errors;
mod exactly_once;
mod failover;
mod fairness;
mod faults;
mod full_disk;
mod idempotency;
mod inputs;
mod job_counts;
mod lifecycle;
mod limits;
mod observability;
mod openapi_client;
mod partitions;
mod priorities;
mod query_plans;
mod redis_memory;
mod reports;
mod retention;
mod retries;
mod rolling_upgrade;
mod sagas;
mod scale;
mod schedules;
mod scopes;
mod secrets;
mod traces;
mod upgrade;
mod webhooks;
mod windows;
mod worker_behaviour;
mod workers;
