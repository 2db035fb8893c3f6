//! The audit log on Postgres.

pub(crate) use crate::portable::postgres::audit::*;
