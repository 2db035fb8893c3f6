//! Secrets at rest on Postgres.

pub(crate) use crate::portable::postgres::secrets::*;

/// What the clear `secret` column holds once the row's secret is sealed.
pub(crate) const CLEARED_SECRET: Option<&str> = None;
