//! The audit log on SQLite.

pub(crate) use crate::portable::sqlite::audit::*;
