//! Registered kinds on SQLite: every statement is portable.

pub(crate) use crate::portable::sqlite::kinds::*;
