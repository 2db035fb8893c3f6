use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The store's one error type.
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
    /// A stored secret is sealed under a master key this process does not
    /// hold: a process that holds it (or this one restarted with it) can
    /// read it, so a caller may retry later. At a start, the same finding
    /// is an [`Error::Config`].
    #[error("{0}")]
    KeyNotHeld(String),
    /// The error of a group commit, shared by every write in it.
    #[error("{0}")]
    Batch(#[source] std::sync::Arc<Error>),
}

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        if is_unavailable_sqlx(&error) {
            Error::Unavailable(error)
        } else {
            Error::Database(error)
        }
    }
}

/// Postgres codes that mean "try again": the server is starting, stopping,
/// overloaded, out of disk or memory, or refusing connections (classes 08,
/// 53 (53100 is a full disk), 57P, and 55000 for a database not accepting
/// connections), or the transaction lost a race it can win on a second try
/// (40001 serialization failure, 40P01 deadlock, 40003 completion unknown).
fn is_unavailable_code(code: Option<&str>) -> bool {
    let Some(code) = code else {
        return false;
    };
    matches!(code, "40001" | "40P01" | "40003" | "55000")
        || code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P")
}

/// SQLite's (extended) result codes that mean "try again": busy and locked
/// (5, 6), which pass; a full disk (13) and a failed read or write (10,
/// with its extended codes), which pass once space returns. SQLite rolls
/// back the statement or transaction that met them, so the file stays
/// whole.
fn is_unavailable_sqlite_code(code: i32) -> bool {
    matches!(code & 0xff, 5 | 6 | 10 | 13)
}

impl From<shared::settings::SettingsError> for Error {
    fn from(error: shared::settings::SettingsError) -> Self {
        Error::Config(error.0)
    }
}

/// Whether this database error is one to try again after: the server is
/// down or refusing (a connection cut mid-answer reads as a protocol
/// error), or answered with a code that says so.
fn is_unavailable_sqlx(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        // SQLite's codes are numbers, some of which read as Postgres's.
        sqlx::Error::Database(db)
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
        {
            db.code()
                .and_then(|code| code.parse().ok())
                .is_some_and(is_unavailable_sqlite_code)
        }
        sqlx::Error::Database(db) => is_unavailable_code(db.code().as_deref()),
        _ => false,
    }
}

impl Error {
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable(_) | Error::KeyNotHeld(_) => true,
            Error::Batch(error) => error.is_unavailable(),
            // Migrations meet the same outages as any other statement.
            Error::Migrate(
                sqlx::migrate::MigrateError::Execute(error)
                | sqlx::migrate::MigrateError::ExecuteMigration(error, _),
            ) => is_unavailable_sqlx(error),
            _ => false,
        }
    }
}

/// The error of a commit whose answer was lost: the database did the work,
/// and the caller cannot tell.
pub fn lost_answer(point: &str) -> Error {
    Error::Unavailable(sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        format!("failpoint {point}: the answer was lost"),
    )))
}

/// `result`, or, when the point is armed and the step succeeded, the
/// error of a lost answer in its place.
pub fn lose_answer<T>(point: &str, result: Result<T>) -> Result<T> {
    match result {
        Ok(_) if shared::failpoints::armed(point) => Err(lost_answer(point)),
        result => result,
    }
}

#[cfg(test)]
mod tests {
    use super::{is_unavailable_code, is_unavailable_sqlite_code};

    #[test]
    fn sqlite_busy_locked_full_or_failing_to_write_is_worth_another_try_and_a_bug_is_not() {
        // BUSY, BUSY_SNAPSHOT, LOCKED, IOERR_WRITE, IOERR_FSYNC, FULL.
        for code in [5, 517, 6, 778, 1034, 13] {
            assert!(is_unavailable_sqlite_code(code), "{code}");
        }
        // CONSTRAINT_UNIQUE, ERROR, MISMATCH, CORRUPT.
        for code in [2067, 1, 20, 11] {
            assert!(!is_unavailable_sqlite_code(code), "{code}");
        }
    }

    #[test]
    fn a_lost_race_or_a_lost_server_is_worth_another_try_and_a_bug_is_not() {
        for code in [
            "40001", "40P01", "08006", "08003", "57P01", "53300", "53100", "55000",
        ] {
            assert!(is_unavailable_code(Some(code)), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "40002"] {
            assert!(!is_unavailable_code(Some(code)), "{code}");
        }
        assert!(!is_unavailable_code(None));
    }
}
