//! The queue crate's one error type.

use apalis::prelude::TaskSinkError;
use redis::{ErrorKind, ServerErrorKind};

/// Why a queue operation failed. [`Error::is_unavailable`] tells an outage
/// (Redis or the database down, which the caller rides out) from a bug.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis, as the queue.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The database: the outbox and the job rows through the store,
    /// or apalis's tables.
    #[error(transparent)]
    Database(#[from] store::Error),
    /// apalis's SQLite storage refused a push or its setup for a reason other
    /// than the database's.
    #[error("queue storage: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// apalis could not encode a message.
    #[error("encoding a queue message: {0}")]
    Encode(#[source] Box<dyn std::error::Error + Send + Sync>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A database error on apalis's tables reads like one on the store's:
/// classified once, by `store::Error`.
impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        Error::Database(error.into())
    }
}

impl<E> From<TaskSinkError<E>> for Error
where
    E: Into<Error> + std::error::Error + Send + Sync + 'static,
{
    fn from(error: TaskSinkError<E>) -> Self {
        match error {
            TaskSinkError::PushError(error) => error.into(),
            TaskSinkError::CodecError(error) => Error::Encode(error),
            other => Error::Storage(Box::new(other)),
        }
    }
}

impl Error {
    /// Whether Redis or the database did not answer (down, restarting,
    /// failing over, connection lost): worth another try later, unlike
    /// any other error.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Redis(error) => redis_unavailable(error),
            Error::Database(error) => error.is_unavailable(),
            Error::Storage(_) | Error::Encode(_) => false,
        }
    }
}

/// Redis down or unreachable, loading its data after a restart, or in the
/// middle of a failover (a write reaching a replica answers `READONLY`; the
/// Sentinels name no primary yet).
fn redis_unavailable(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::Error;

    #[test]
    fn an_outage_of_redis_or_the_database_is_worth_another_try_and_a_bug_is_not() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let outages = [
            Error::Redis(RedisError::from(refused)),
            Error::Redis(RedisError::from((
                ErrorKind::Server(ServerErrorKind::BusyLoading),
                "loading",
            ))),
            Error::Redis(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ReadOnly),
                "replica",
            ))),
            Error::Redis(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "no primary yet",
            ))),
            Error::from(sqlx::Error::PoolTimedOut),
        ];
        for error in &outages {
            assert!(error.is_unavailable(), "{error}");
        }
        let bugs = [
            Error::Redis(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "script failed",
            ))),
            Error::Redis(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "not a number",
            ))),
            Error::from(sqlx::Error::RowNotFound),
            Error::Encode("not JSON".into()),
            Error::Storage("worker out of sync".into()),
        ];
        for error in &bugs {
            assert!(!error.is_unavailable(), "{error}");
        }
    }
}
