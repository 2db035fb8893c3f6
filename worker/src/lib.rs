//! The worker side: the apalis pool that runs jobs (fed by the `queue`
//! crate's queue and outbox relay), the lease sweeper, the webhook dispatcher, and the
//! retention pruner and queue vacuum that keep storage bounded. apalis is
//! the transport; the database is the truth (`docs/design.md`): every state
//! change is made, and fenced, in the store.

mod backend;
mod background;
mod claims;
mod dispatcher;
pub mod drive;
mod error;
mod gauges;
mod pool;
mod process;
mod retention;
mod runner;
mod scheduler;
mod sweeper;
mod traces;
mod workers;

pub use dispatcher::Dispatcher;
pub use error::{Error, Result};
pub use pool::WorkerPool;
pub use process::{cancel_on_signal, run_worker_process};
pub use retention::{run_pruner, run_queue_vacuum};
pub use runner::Runner;
pub use sweeper::run_sweeper;
