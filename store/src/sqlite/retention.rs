//! Retention on SQLite: deleting final jobs with what hangs off them.

use sqlx::{SqliteConnection, types::Json};

use crate::sql::Millis;

/// Up to `limit` jobs final since before `finished_before`, oldest first.
/// The final statuses stay literals: only they match the partial index
/// `jobs_finished`.
pub(crate) async fn finished(
    conn: &mut SqliteConnection,
    finished_before: Millis,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "SELECT job_id FROM jobs
         WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at < $1
         ORDER BY finished_at LIMIT $2"
    ))
    .bind(finished_before)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The jobs' webhook events, in id order.
pub(crate) async fn events_of(
    conn: &mut SqliteConnection,
    job_ids: &[String],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "SELECT event_id FROM webhook_events WHERE job_id IN (SELECT value FROM json_each($1))
         ORDER BY event_id"
    ))
    .bind(Json(job_ids))
    .fetch_all(conn)
    .await
}

/// Deletes events and their delivery log by the events' ids.
pub(crate) async fn delete_events(
    conn: &mut SqliteConnection,
    event_ids: &[String],
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM webhook_deliveries WHERE event_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(event_ids))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "DELETE FROM webhook_events WHERE event_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(event_ids))
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the jobs, their per-job webhooks and their results; returns
/// the jobs deleted.
pub(crate) async fn delete_jobs(
    conn: &mut SqliteConnection,
    job_ids: &[String],
) -> sqlx::Result<u64> {
    // A webhook for one job hears nothing more once the job is gone; its
    // events and log went before.
    sqlx::query(sql!(
        "DELETE FROM webhooks WHERE job_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(job_ids))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "DELETE FROM job_results WHERE job_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(job_ids))
    .execute(&mut *conn)
    .await?;
    // A final job has no outbox row; one left over would cascade, as its
    // result's chunks and its saga's rows do.
    Ok(sqlx::query(sql!(
        "DELETE FROM jobs WHERE job_id IN (SELECT value FROM json_each($1))"
    ))
    .bind(Json(job_ids))
    .execute(conn)
    .await?
    .rows_affected())
}
