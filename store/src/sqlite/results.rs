//! Results and their chunks on SQLite.

use sqlx::{SqliteConnection, SqliteExecutor};

use crate::results::ResultRow;

pub(crate) async fn get(
    db: impl SqliteExecutor<'_>,
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
    db: impl SqliteExecutor<'_>,
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

pub(crate) async fn discard_all(conn: &mut SqliteConnection, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM job_result_chunks WHERE job_id = $1"))
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}
