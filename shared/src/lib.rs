//! What the `api` and `worker` binaries share: settings, the job model and
//! its state machine, the store (all SQL), the ledger and the report kinds,
//! and how both log.

pub mod batch;
pub mod calendar;
pub mod error;
pub mod failpoints;
pub mod ledger;
pub mod logging;
pub mod model;
pub mod notify;
pub mod reports;
pub mod saga;
pub mod settings;
pub mod store;
pub mod time;
pub mod webhooks;

pub use error::{Error, Result};
