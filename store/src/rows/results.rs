//! Stored results: the rows its statements read and write.

use crate::sql::JsonText;

/// A `job_results` row: a document, or the attempt and count of its chunks.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ResultRow {
    pub(crate) body: Option<JsonText>,
    pub(crate) chunk_attempt: Option<i64>,
    pub(crate) chunk_count: Option<i64>,
}
