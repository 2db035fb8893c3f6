//! A session on Postgres: its transactions are sqlx's own.

pub(crate) use crate::portable::postgres::session::*;
