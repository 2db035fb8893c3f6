//! Receipt's vocabulary: the job and its states, the API's objects, the
//! built-in report kinds' parameters, attempt outcomes, ids,
//! time, dates and months, money and ledger entries, the settings each
//! binary reads, failpoints, in-process signals and the retry loop. No I/O: every crate
//! may depend on this one, and it depends on none of them.

pub mod calendar;
pub mod failpoints;
pub mod ids;
pub mod ledger;
pub mod model;
pub mod notify;
pub mod objects;
pub mod report_params;
pub mod retry;
pub mod schedule;
pub mod settings;
pub mod time;
pub mod work;
