//! The database queue: the rows its statements read and write.

use crate::sql::Millis;

/// A fetched message and its place in the fetch's order.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct FetchedMessage {
    pub(crate) message_id: i64,
    pub(crate) job_id: String,
    pub(crate) tenant_id: String,
    pub(crate) rank_at: Millis,
    /// The tenant's turn in this fetch.
    pub(crate) turn: i64,
    /// The message's place among its tenant's in this fetch.
    pub(crate) n: i64,
}
