//! The queue crate's one error type.

use redis::{ErrorKind, ServerErrorKind};

/// Why a queue operation failed. [`Error::is_unavailable`] tells an outage
/// (Redis or the database down, which the caller rides out) from a bug.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis, as the queue.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The database, through the store: the outbox, the job rows, and
    /// what apalis's storage of earlier versions left.
    #[error(transparent)]
    Database(#[from] store::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether Redis or the database did not answer (down, restarting,
    /// failing over, connection lost): worth another try later, unlike
    /// any other error.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Redis(error) => redis_unavailable(error),
            Error::Database(error) => error.is_unavailable(),
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
            Error::Database(sqlx::Error::PoolTimedOut.into()),
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
            Error::Database(sqlx::Error::RowNotFound.into()),
        ];
        for error in &bugs {
            assert!(!error.is_unavailable(), "{error}");
        }
    }
}
