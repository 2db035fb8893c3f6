//! Idempotency keys: the rows its statements read and write.

use crate::sql::{JsonText, Millis};

/// A key's row as both databases return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KeyRow {
    pub(crate) tenant_id: String,
    pub(crate) idem_key: String,
    pub(crate) fingerprint: String,
    pub(crate) expires_at: Millis,
    pub(crate) response_status: i64,
    pub(crate) response_headers: JsonText,
    pub(crate) response_body: Vec<u8>,
}

/// A key to write with its answer, as the statements bind it.
pub(crate) struct KeyWrite<'a> {
    pub(crate) tenant_id: &'a str,
    pub(crate) key: &'a str,
    pub(crate) fingerprint: &'a str,
    pub(crate) expires_at: Millis,
    pub(crate) status: i64,
    /// The replayed headers, as a JSON array of pairs.
    pub(crate) headers: String,
    pub(crate) body: &'a [u8],
}
