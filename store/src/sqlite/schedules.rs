//! Schedules on SQLite: lists as one JSON array parameter.

use sqlx::SqliteConnection;

use crate::{
    rows::schedules::{FiredJob, ScheduleMove, ScheduleRow},
    sql::Millis,
};

pub(crate) use crate::portable::sqlite::schedules::*;

/// Schedules due by `until`.
pub(crate) async fn due(
    conn: &mut SqliteConnection,
    until: Millis,
    limit: i64,
) -> sqlx::Result<Vec<ScheduleRow>> {
    sqlx::query_as(sql!(
        "SELECT schedule_id, tenant_id, kind, params, cron, timezone, starts_at, ends_at, misfire,
                priority, paused, next_fire_at, last_fire_at, created_at, updated_at
         FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= $1
         ORDER BY next_fire_at LIMIT $2"
    ))
    .bind(until)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The fires' jobs, made at `now`, each due at its fire (at once for a
/// fire past) with its outbox row, unpublished until then; a fire that
/// already has its job makes none. Returns how many were made.
pub(crate) async fn insert_fired_jobs(
    conn: &mut SqliteConnection,
    jobs: &[FiredJob],
    ranks: &[Millis],
    now: Millis,
) -> sqlx::Result<usize> {
    let rows = serde_json::Value::Array(
        jobs.iter()
            .zip(ranks)
            .map(|(j, rank)| {
                serde_json::json!([
                    j.job.job_id,
                    j.job.tenant_id,
                    j.job.kind,
                    j.job.params,
                    j.job.max_attempts,
                    j.schedule_id,
                    j.fire_at,
                    j.job.priority.as_str(),
                    rank.0
                ])
            })
            .collect(),
    )
    .to_string();
    let made = sqlx::query(sql!(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at, run_after,
                           status, schedule_id, fire_at, priority, rank_at, external)
         SELECT json_extract(f.value, '$[0]'), json_extract(f.value, '$[1]'),
                json_extract(f.value, '$[2]'), json_extract(f.value, '$[3]'),
                COALESCE(k.max_attempts, json_extract(f.value, '$[4]')), $2,
                MAX(json_extract(f.value, '$[6]'), $2), 'QUEUED',
                json_extract(f.value, '$[5]'), json_extract(f.value, '$[6]'),
                json_extract(f.value, '$[7]'), json_extract(f.value, '$[8]'),
                k.name IS NOT NULL
         FROM json_each($1) AS f
         LEFT JOIN registered_kinds k
             ON k.tenant_id = json_extract(f.value, '$[1]')
            AND k.name = json_extract(f.value, '$[2]') AND k.deleted_at IS NULL
         WHERE true
         ON CONFLICT (schedule_id, fire_at) WHERE schedule_id IS NOT NULL DO NOTHING"
    ))
    .bind(&rows)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    // Only the jobs just made carry these ids.
    sqlx::query(sql!(
        "INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
         SELECT job_id, run_after, 0, rank_at FROM jobs
         WHERE job_id IN (SELECT json_extract(value, '$[0]') FROM json_each($1))
           AND NOT external AND NOT EXISTS (SELECT 1 FROM queue_in_job_rows)"
    ))
    .bind(&rows)
    .execute(conn)
    .await?;
    Ok(usize::try_from(made).unwrap_or(usize::MAX))
}

/// One statement per schedule: in the process, a prepared statement costs
/// less than reading a JSON list of every schedule once per row.
pub(crate) async fn move_on(
    conn: &mut SqliteConnection,
    moves: &[ScheduleMove],
) -> sqlx::Result<()> {
    for m in moves {
        sqlx::query(sql!(
            "UPDATE schedules SET next_fire_at = $2, last_fire_at = $3 WHERE schedule_id = $1"
        ))
        .bind(&m.schedule_id)
        .bind(m.next_fire_at.map(Millis))
        .bind(m.last_fire_at.map(Millis))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
