//! Submits on SQLite: the jobs of a batch as one JSON array of rows.

use sqlx::SqliteConnection;

use crate::{Submission, sql::Millis};

/// Inserts the jobs and their outbox rows, due `republish_ms` after each
/// job was made, or unpublished at a delayed job's start; with a negative
/// `republish_ms`, only the delayed jobs' rows; none where the job rows
/// are the queue, nor for external jobs (leased from their rows).
pub(crate) async fn insert_jobs(
    conn: &mut SqliteConnection,
    submissions: &[&Submission],
    ranks: &[Millis],
    republish_ms: i64,
) -> sqlx::Result<()> {
    let rows = serde_json::Value::Array(
        submissions
            .iter()
            .zip(ranks)
            .map(|(s, rank)| {
                serde_json::json!([
                    s.job.job_id,
                    s.job.tenant_id,
                    s.job.kind,
                    s.job.params,
                    s.job.max_attempts,
                    s.created_at,
                    s.run_after,
                    s.job.priority.as_str(),
                    rank.0,
                    s.traceparent,
                    s.job.external
                ])
            })
            .collect(),
    )
    .to_string();
    sqlx::query(sql!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                           status, priority, rank_at, traceparent, external)
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), json_extract(value, '$[3]'),
                json_extract(value, '$[4]'), json_extract(value, '$[5]'),
                json_extract(value, '$[6]'), 'QUEUED', json_extract(value, '$[7]'),
                json_extract(value, '$[8]'), json_extract(value, '$[9]'),
                json_extract(value, '$[10]')
         FROM json_each($1)"
    ))
    .bind(&rows)
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT json_extract(value, '$[0]'),
                CASE WHEN json_extract(value, '$[6]') > json_extract(value, '$[5]')
                     THEN json_extract(value, '$[6]')
                     ELSE json_extract(value, '$[5]') + $2 END,
                CASE WHEN json_extract(value, '$[6]') > json_extract(value, '$[5]')
                     THEN 0 ELSE $2 END,
                json_extract(value, '$[8]')
         FROM json_each($1)
         WHERE (json_extract(value, '$[6]') > json_extract(value, '$[5]') OR $2 >= 0)
           AND NOT json_extract(value, '$[10]')
           AND NOT EXISTS (SELECT 1 FROM queue_in_job_rows)"
    ))
    .bind(&rows)
    .bind(republish_ms)
    .execute(conn)
    .await?;
    Ok(())
}
