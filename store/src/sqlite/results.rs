//! Results and their chunks on SQLite.

use sqlx::SqliteExecutor;

pub(crate) use crate::portable::sqlite::results::*;

/// Runs under the write turn: no claim, sweep or final status of this job
/// interleaves with it.
pub(crate) async fn write_chunk(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    attempt: i64,
    seq: i64,
    body: &str,
) -> sqlx::Result<bool> {
    let written = sqlx::query(sql!(
        "INSERT INTO job_result_chunks (job_id, attempt, seq, body)
         SELECT job_id, attempts, $3, $4 FROM jobs
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(seq)
    .bind(body)
    .execute(db)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// Deletes up to `limit` chunks of attempts before `attempt`.
pub(crate) async fn discard_before(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    attempt: i64,
    limit: i64,
) -> sqlx::Result<u64> {
    let deleted = sqlx::query(sql!(
        "DELETE FROM job_result_chunks WHERE rowid IN (
             SELECT rowid FROM job_result_chunks
             WHERE job_id = $1 AND attempt < $2 ORDER BY attempt, seq LIMIT $3)"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(limit)
    .execute(db)
    .await?;
    Ok(deleted.rows_affected())
}

/// Writes chunk `seq` of a streamed result (its bytes and media type),
/// fenced as [`write_chunk`]; a chunk the attempt wrote before (a
/// complete sent again) is replaced.
pub(crate) async fn write_bytes_chunk(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    attempt: i64,
    seq: i64,
    data: &[u8],
    media_type: &str,
) -> sqlx::Result<bool> {
    let written = sqlx::query(sql!(
        "INSERT INTO job_result_chunks (job_id, attempt, seq, body, data, media_type)
         SELECT job_id, attempts, $3, '', $4, $5 FROM jobs
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
         ON CONFLICT (job_id, attempt, seq) DO UPDATE SET data = excluded.data,
             media_type = excluded.media_type"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(seq)
    .bind(data)
    .bind(media_type)
    .execute(db)
    .await?;
    Ok(written.rows_affected() == 1)
}
