//! Secrets at rest on SQLite.

pub(crate) use crate::portable::sqlite::secrets::*;

/// What the clear `secret` column holds once the row's secret is sealed:
/// the column stays NOT NULL on SQLite, and this is no base64, so no
/// process signs with it (migration `secrets_at_rest`).
pub(crate) const CLEARED_SECRET: Option<&str> = Some("(sealed)");
