//! The worker's behaviour driven in-process (`worker::drive`): every due
//! job run in the test's own task, so a test asserts on what running them
//! did (results, retries, steps, the order of claims), with no pool to
//! start and nothing to wait for. Each test runs on the embedded SQLite
//! default and on Postgres, a database of its own each (the store's suite,
//! `store/tests/suite`, is the model).

mod harness;

mod caps;
mod drive;
mod kinds;
mod priorities;
mod retries;
mod sagas;
