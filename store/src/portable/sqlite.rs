//! The portable statements on SQLite.

pub(crate) type Db = sqlx::Sqlite;
pub(crate) type Conn = sqlx::SqliteConnection;

areas!();
