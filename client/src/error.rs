//! The client's one error type, and the problem document it carries when
//! Receipt refused a request.

use std::time::Duration;

pub use shared::{ledger::FieldError, objects::Problem};

use crate::Job;

/// The problem of an answer that carried no problem document (a proxy in
/// between answered, say): named by its status alone.
pub(crate) fn problem_of_status(status: u16, text: &str) -> Problem {
    let title = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
        .to_owned();
    Problem {
        problem_type: "/problems/http-error".to_owned(),
        title,
        status,
        detail: text.chars().take(500).collect(),
        errors: None,
        ids: None,
        required_scope: None,
    }
}

/// Everything a call of the client can end with other than its answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Receipt answered with a problem: a 4xx that sending the same
    /// request again would not change, or a retryable status (5xx, 429,
    /// 409 in progress) that outlasted the call's deadline or its tries
    /// ([`crate::RetryPolicy`]).
    #[error("{} {}: {}", .problem.status, .problem.title, .problem.detail)]
    Api {
        /// The problem document of the answer.
        problem: Box<Problem>,
        /// The answer's `Retry-After`, when it had one.
        retry_after: Option<Duration>,
    },
    /// No answer came (a refused or cut connection, a timeout), on any
    /// try within the call's deadline or its tries.
    #[error("no answer from Receipt: {0}")]
    Transport(#[source] reqwest::Error),
    /// A job's result was cut short after `written` bytes had gone to
    /// the writer: ask again, into a fresh writer.
    #[error("the result was cut short after {written} bytes: {source}")]
    Interrupted {
        /// Bytes written before the cut.
        written: u64,
        /// What cut it.
        #[source]
        source: reqwest::Error,
    },
    /// [`crate::Client::wait`] reached its deadline before the job
    /// ended; the job as last seen.
    #[error("job {} is still {} after the wait's deadline", .0.job_id, .0.status.as_str())]
    WaitTimedOut(Box<Job>),
    /// The writer a result was streamed to failed.
    #[error("writing the result: {0}")]
    Io(#[from] std::io::Error),
    /// An answer that is not what the contract says (not JSON of the
    /// documented shape).
    #[error("an unexpected answer: {0}")]
    Unexpected(String),
    /// A webhook's signature or timestamp did not check out
    /// ([`crate::WebhookVerifier`]).
    #[error("webhook refused: {0}")]
    WebhookRejected(crate::webhooks::Rejection),
    /// The client was given something it cannot send: a base URL that is
    /// not one, a key that is not a header value, a bad argument.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The problem document, when Receipt answered with one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Api { problem, .. } => Some(problem),
            _ => None,
        }
    }

    /// The HTTP status, when Receipt answered.
    pub fn status(&self) -> Option<u16> {
        self.problem().map(|p| p.status)
    }

    /// A 422's fields and what is wrong with each; empty otherwise.
    pub fn field_errors(&self) -> &[FieldError] {
        self.problem()
            .and_then(|p| p.errors.as_deref())
            .unwrap_or_default()
    }

    /// Whether Receipt answered 404: the job, webhook, schedule or kind
    /// does not exist (or is another tenant's).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

/// What the client's calls return.
pub type Result<T, E = Error> = std::result::Result<T, E>;
