//! Stored results, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::rows::results::{BytesChunk, ResultRow};

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
    tenant_id: &str,
    job_id: &str,
) -> sqlx::Result<Option<ResultRow>> {
    sqlx::query_as(sql!(
        "SELECT r.body, r.chunk_attempt, r.chunk_count
         FROM job_results r JOIN jobs j ON j.job_id = r.job_id
         WHERE r.job_id = $1 AND j.tenant_id = $2"
    ))
    .bind(job_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn chunk(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
    attempt: i64,
    seq: i64,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(sql!(
        "SELECT body FROM job_result_chunks WHERE job_id = $1 AND attempt = $2 AND seq = $3"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(seq)
    .fetch_optional(db)
    .await
}

/// Chunk `seq` of a streamed result of a worker over HTTP: its bytes and
/// media type (`None` for a chunk of JSON values).
pub(crate) async fn bytes_chunk(
    db: impl Executor<'_, Database = Db>,
    job_id: &str,
    attempt: i64,
    seq: i64,
) -> sqlx::Result<Option<BytesChunk>> {
    sqlx::query_as(sql!(
        "SELECT data, media_type FROM job_result_chunks
         WHERE job_id = $1 AND attempt = $2 AND seq = $3"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(seq)
    .fetch_optional(db)
    .await
}

pub(crate) async fn discard_all(conn: &mut Conn, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM job_result_chunks WHERE job_id = $1"))
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}
