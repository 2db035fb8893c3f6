//! Registered kinds on Postgres: every statement is portable.

pub(crate) use crate::portable::postgres::kinds::*;
