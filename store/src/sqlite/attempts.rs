//! Attempts on SQLite.

use sqlx::{SqliteConnection, SqliteExecutor};

use super::json_list;
use crate::{
    attempts::{AttemptEnd, ClaimRow, LapsedRow, Success},
    sql::Millis,
};

/// Requiring QUEUED is the guard: of two deliveries of one job, in this
/// batch or in two processes, one finds it RUNNING (as in Postgres's
/// `claim_jobs`). The claimed jobs' outbox rows go in the same
/// transaction.
pub(crate) async fn claim(
    conn: &mut SqliteConnection,
    job_ids: &[String],
    now: Millis,
    lease_until: Millis,
    worker_id: &str,
) -> sqlx::Result<Vec<ClaimRow>> {
    let claimed: Vec<ClaimRow> = sqlx::query_as(sql!(
        "UPDATE jobs SET status = 'RUNNING', attempts = attempts + 1,
             started_at = COALESCE(started_at, $1), lease_expires_at = $2, worker_id = $3
         WHERE job_id IN (SELECT value FROM json_each($4)) AND status = 'QUEUED'
           AND run_after <= $1
         RETURNING job_id, tenant_id, kind, params, attempts, handbacks, max_attempts"
    ))
    .bind(now)
    .bind(lease_until)
    .bind(worker_id)
    .bind(json_list(job_ids.iter().map(String::as_str)))
    .fetch_all(&mut *conn)
    .await?;
    if !claimed.is_empty() {
        sqlx::query(sql!(
            "DELETE FROM outbox WHERE job_id IN (SELECT value FROM json_each($1))"
        ))
        .bind(json_list(claimed.iter().map(|row| row.job_id.as_str())))
        .execute(conn)
        .await?;
    }
    Ok(claimed)
}

pub(crate) async fn held_by(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    worker_id: &str,
) -> sqlx::Result<Option<ClaimRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, tenant_id, kind, params, attempts, handbacks, max_attempts FROM jobs
         WHERE job_id = $1 AND status = 'RUNNING' AND worker_id = $2"
    ))
    .bind(job_id)
    .bind(worker_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn heartbeat(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    attempt: i64,
    lease_until: Millis,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(sql!(
        "UPDATE jobs SET lease_expires_at = $3
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
         RETURNING cancel_requested"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(lease_until)
    .fetch_optional(db)
    .await
}

pub(crate) async fn set_progress(
    db: impl SqliteExecutor<'_>,
    job_id: &str,
    attempt: i64,
    progress: f64,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(sql!(
        "UPDATE jobs SET progress = $3
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'
         RETURNING cancel_requested"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(progress)
    .fetch_optional(db)
    .await
}

/// Cancels the running attempt if a cancel was asked; whether it did.
pub(crate) async fn cancel_if_asked(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = 'CANCELLED', finished_at = $3, lease_expires_at = NULL,
             worker_id = NULL, cancel_requested = false
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING' AND cancel_requested = 1"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends the running attempt without a result; whether it applied. A
/// cancel asked stays asked on a job queued again (its next attempt
/// stops at once).
pub(crate) async fn end(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    end: &AttemptEnd<'_>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = $3, finished_at = $4, run_after = COALESCE($5, run_after),
             error_type = $6, error_message = $7, lease_expires_at = NULL, worker_id = NULL,
             cancel_requested = CASE WHEN $3 = 'QUEUED' THEN cancel_requested ELSE false END,
             handbacks = handbacks + $8
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(end.status.as_str())
    .bind(end.finished_at)
    .bind(end.run_after)
    .bind(end.error.map(|e| e.error_type.as_str()))
    .bind(end.error.map(|e| e.message.as_str()))
    .bind(i64::from(end.handed_back))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Sets the batch's running attempts `SUCCEEDED` and stores the results
/// of those that applied (the fence). Returns the attempts that applied.
pub(crate) async fn succeed(
    conn: &mut SqliteConnection,
    successes: &[Success<'_>],
    now: Millis,
) -> sqlx::Result<Vec<(String, i64)>> {
    let pairs: Vec<(&str, i64)> = successes.iter().map(|s| (s.job_id, s.attempt)).collect();
    let applied: Vec<(String, i64)> = sqlx::query_as(sql!(
        "UPDATE jobs SET status = 'SUCCEEDED', finished_at = $1, progress = 1.0,
             error_type = NULL, error_message = NULL, lease_expires_at = NULL,
             worker_id = NULL, cancel_requested = false
         WHERE status = 'RUNNING' AND (job_id, attempts) IN (
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($2))
         RETURNING job_id, attempts"
    ))
    .bind(now)
    .bind(serde_json::to_string(&pairs).expect("pairs serialize"))
    .fetch_all(&mut *conn)
    .await?;
    // One result per job that applied: the fence above lets one attempt
    // per job through, and the conflict clause is a second guard for a row
    // left by an interrupted earlier write. A chunked result is named by
    // its attempt: chunks of any other attempt are never served.
    let results: Vec<serde_json::Value> = successes
        .iter()
        .filter(|s| {
            applied
                .iter()
                .any(|(job, attempt)| job == s.job_id && *attempt == s.attempt)
        })
        .map(|s| {
            serde_json::json!([
                s.job_id,
                s.document.unwrap_or(""),
                s.chunks.map(|_| s.attempt),
                s.chunks
            ])
        })
        .collect();
    if !results.is_empty() {
        sqlx::query(sql!(
            "INSERT INTO job_results (job_id, body, chunk_attempt, chunk_count)
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                    json_extract(value, '$[2]'), json_extract(value, '$[3]')
             FROM json_each($1) WHERE true
             ON CONFLICT (job_id) DO UPDATE SET body = excluded.body,
                 chunk_attempt = excluded.chunk_attempt, chunk_count = excluded.chunk_count"
        ))
        .bind(serde_json::Value::Array(results).to_string())
        .execute(conn)
        .await?;
    }
    Ok(applied)
}

/// Running jobs whose lease lapsed; `'RUNNING'` a literal, so the partial
/// index `jobs_running_leases` serves it.
pub(crate) async fn lapsed(
    conn: &mut SqliteConnection,
    now: Millis,
    limit: i64,
) -> sqlx::Result<Vec<LapsedRow>> {
    sqlx::query_as(sql!(
        "SELECT job_id, attempts - handbacks AS counted, max_attempts,
                EXISTS (SELECT 1 FROM saga_runs r
                        WHERE r.job_id = jobs.job_id
                          AND r.phase IN ('forward', 'compensating')) AS saga_unfinished
         FROM jobs
         WHERE status = 'RUNNING' AND lease_expires_at < $1
         ORDER BY lease_expires_at LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(conn)
    .await
}

pub(crate) async fn requeue_lapsed(
    conn: &mut SqliteConnection,
    job_id: &str,
    now: Millis,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET status = 'QUEUED', run_after = $2, lease_expires_at = NULL,
             worker_id = NULL, error_type = 'lease_expired', error_message = $3
         WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(now)
    .bind(message)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn fail_lapsed(
    conn: &mut SqliteConnection,
    job_id: &str,
    now: Millis,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE jobs SET status = 'FAILED', finished_at = $2, lease_expires_at = NULL,
             worker_id = NULL, error_type = 'lease_expired', error_message = $3,
             cancel_requested = false
         WHERE job_id = $1"
    ))
    .bind(job_id)
    .bind(now)
    .bind(message)
    .execute(conn)
    .await?;
    Ok(())
}

/// Hands a running attempt back to the queue; whether it applied.
pub(crate) async fn hand_back(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    now: Millis,
) -> sqlx::Result<bool> {
    let done = sqlx::query(sql!(
        "UPDATE jobs SET status = 'QUEUED', run_after = $3, lease_expires_at = NULL,
             worker_id = NULL, handbacks = handbacks + 1, error_type = 'shutdown',
             error_message = 'the worker shut down before the attempt finished'
         WHERE job_id = $1 AND attempts = $2 AND status = 'RUNNING'"
    ))
    .bind(job_id)
    .bind(attempt)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
