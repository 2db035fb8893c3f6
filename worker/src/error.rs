//! The worker crate's one error type.

use std::time::Duration;

/// Why a worker operation failed. Job attempts do not fail with it: their
/// failures are `reports::JobFailure`, recorded on the job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database, through the store.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The queue: connecting to it, recovering it, handing messages back.
    #[error(transparent)]
    Queue(#[from] queue::Error),
    /// apalis running its workers.
    #[error("queue: {0}")]
    Apalis(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `METRICS_ADDR` could not be served.
    #[error("cannot serve metrics on METRICS_ADDR {addr}: {detail}")]
    Metrics { addr: String, detail: String },
    /// A webhook's address was refused, or its secret is unusable: the
    /// delivery was not sent.
    #[error("{0}")]
    WebhookRefused(String),
    /// A webhook receiver did not answer in time.
    #[error("no answer within {}s", .0.as_secs_f64())]
    WebhookTimeout(Duration),
    /// A webhook delivery failed on the way (connection, TLS, protocol).
    #[error("{0}")]
    Http(#[from] reqwest::Error),
}

impl Error {
    /// Postgres or Redis is down or refusing: worth trying again.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Store(error) | Error::Queue(queue::Error::Database(error)) => {
                error.is_unavailable()
            }
            Error::Queue(queue::Error::Redis(error)) => {
                error.is_io_error() || error.is_connection_refusal() || error.is_timeout()
            }
            _ => false,
        }
    }

    /// An apalis error, whatever its type.
    pub fn apalis(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Apalis(Box::new(error))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
