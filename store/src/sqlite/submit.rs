//! Submits on SQLite: the jobs of a batch as one JSON array of rows.

use sqlx::SqliteConnection;

use crate::Submission;

/// Inserts the jobs and their outbox rows, due `republish_ms` after each
/// job was made, or unpublished at a delayed job's start.
pub(crate) async fn insert_jobs(
    conn: &mut SqliteConnection,
    submissions: &[&Submission],
    republish_ms: i64,
) -> sqlx::Result<()> {
    let rows = serde_json::Value::Array(
        submissions
            .iter()
            .map(|s| {
                serde_json::json!([
                    s.job.job_id,
                    s.job.tenant_id,
                    s.job.kind,
                    s.job.params,
                    s.job.max_attempts,
                    s.created_at,
                    s.run_after
                ])
            })
            .collect(),
    )
    .to_string();
    sqlx::query(sql!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                           status)
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), json_extract(value, '$[3]'),
                json_extract(value, '$[4]'), json_extract(value, '$[5]'),
                json_extract(value, '$[6]'), 'QUEUED'
         FROM json_each($1)"
    ))
    .bind(&rows)
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms)
         SELECT json_extract(value, '$[0]'),
                CASE WHEN json_extract(value, '$[6]') > json_extract(value, '$[5]')
                     THEN json_extract(value, '$[6]')
                     ELSE json_extract(value, '$[5]') + $2 END,
                CASE WHEN json_extract(value, '$[6]') > json_extract(value, '$[5]')
                     THEN 0 ELSE $2 END
         FROM json_each($1)"
    ))
    .bind(&rows)
    .bind(republish_ms)
    .execute(conn)
    .await?;
    Ok(())
}
