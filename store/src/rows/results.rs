//! Stored results: the rows its statements read and write.

use crate::sql::JsonText;

/// A `job_results` row: a document, or the attempt and count of its chunks.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ResultRow {
    pub(crate) body: Option<JsonText>,
    pub(crate) chunk_attempt: Option<i64>,
    pub(crate) chunk_count: Option<i64>,
}

/// A chunk of a result streamed by a worker over HTTP: bytes of its
/// media type. Both are `None` in a chunk of JSON values.
#[derive(Debug, sqlx::FromRow)]
pub struct BytesChunk {
    pub data: Option<Vec<u8>>,
    pub media_type: Option<String>,
}
