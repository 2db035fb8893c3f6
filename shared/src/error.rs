use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The shared crate's one error type.
#[derive(Debug, Error)]
pub enum Error {
    /// The database did not answer (down, pool exhausted, connection lost):
    /// a caller may retry later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Any other database error: a bug or a broken schema.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("invalid setting: {0}")]
    Config(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The error of a group commit, shared by every write in it.
    #[error("{0}")]
    Batch(#[source] std::sync::Arc<Error>),
}

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_) => Error::Unavailable(error),
            sqlx::Error::Database(db) if is_unavailable_code(db.code().as_deref()) => {
                Error::Unavailable(error)
            }
            _ => Error::Database(error),
        }
    }
}

/// Postgres codes for a server that is starting, stopping, overloaded or
/// not accepting connections to the database (55000), and SQLite's
/// busy/locked, all of which pass.
fn is_unavailable_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("57P01" | "57P02" | "57P03" | "53300" | "55000" | "08006" | "08001" | "08004")
            | Some("5" | "6")
    )
}

impl Error {
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Batch(error) => error.is_unavailable(),
            _ => false,
        }
    }
}
