//! The rows the statements read and write, one module per area, below both
//! the area (`crate::<area>`, which builds on them) and each database's
//! statements (`crate::postgres::<area>`, `crate::sqlite::<area>`,
//! `crate::portable`), so that neither imports the other's half.

pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod dashboard;
pub(crate) mod gauges;
pub(crate) mod idempotency;
pub(crate) mod jobs;
pub(crate) mod keys;
pub(crate) mod kinds;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod periods;
pub(crate) mod results;
pub(crate) mod sagas;
pub(crate) mod schedules;
pub(crate) mod secrets;
pub(crate) mod webhooks;
pub(crate) mod work;
