//! The portable statements on Postgres.

pub(crate) type Db = sqlx::Postgres;
pub(crate) type Conn = sqlx::PgConnection;

areas!();
