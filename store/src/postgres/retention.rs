//! Retention on Postgres: deleting final jobs with what hangs off them.

use sqlx::PgConnection;

use crate::sql::Millis;

/// Up to `limit` jobs final since before `finished_before`, oldest first,
/// locked; jobs another transaction holds are skipped, not waited for.
/// The final statuses stay literals: only they match the partial index
/// `jobs_finished`.
pub(crate) async fn take_finished(
    conn: &mut PgConnection,
    finished_before: Millis,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "SELECT job_id FROM jobs
         WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at < $1
         ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    ))
    .bind(finished_before)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The jobs' webhook events, locked in id order.
pub(crate) async fn lock_events_of(
    conn: &mut PgConnection,
    job_ids: &[String],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(sql!(
        "SELECT event_id FROM webhook_events WHERE job_id = ANY ($1)
         ORDER BY event_id FOR UPDATE"
    ))
    .bind(job_ids)
    .fetch_all(conn)
    .await
}

/// Deletes events and their delivery log by the events' ids. Not by a
/// join: `webhook_deliveries.event_id` and `webhook_events.event_id`
/// collate differently, so a join cannot use the log's index and reads
/// the whole log.
pub(crate) async fn delete_events(
    conn: &mut PgConnection,
    event_ids: &[String],
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "DELETE FROM webhook_deliveries WHERE event_id = ANY ($1)"
    ))
    .bind(event_ids)
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!("DELETE FROM webhook_events WHERE event_id = ANY ($1)"))
        .bind(event_ids)
        .execute(conn)
        .await?;
    Ok(())
}

/// Deletes the jobs, their per-job webhooks and their results; returns
/// the jobs deleted.
pub(crate) async fn delete_jobs(conn: &mut PgConnection, job_ids: &[String]) -> sqlx::Result<u64> {
    // A webhook for one job hears nothing more once the job is gone; its
    // events and log went before.
    sqlx::query(sql!("DELETE FROM webhooks WHERE job_id = ANY ($1)"))
        .bind(job_ids)
        .execute(&mut *conn)
        .await?;
    sqlx::query(sql!("DELETE FROM job_results WHERE job_id = ANY ($1)"))
        .bind(job_ids)
        .execute(&mut *conn)
        .await?;
    // A final job has no outbox row; one left over would cascade, as its
    // result's chunks and its saga's rows do.
    Ok(
        sqlx::query(sql!("DELETE FROM jobs WHERE job_id = ANY ($1)"))
            .bind(job_ids)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}
