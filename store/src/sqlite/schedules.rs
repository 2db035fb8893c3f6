//! Schedules on SQLite: lists as one JSON array parameter.

use sqlx::{SqliteConnection, SqliteExecutor};

use crate::{
    schedules::{FiredJob, ScheduleMove, ScheduleRow, ScheduleValues},
    sql::Millis,
};

pub(crate) async fn insert(
    conn: &mut SqliteConnection,
    values: &ScheduleValues<'_>,
) -> sqlx::Result<()> {
    let s = values.schedule;
    sqlx::query(sql!(
        "INSERT INTO schedules (schedule_id, tenant_id, kind, params, cron, timezone, starts_at,
                                ends_at, misfire, paused, next_fire_at, last_fire_at, created_at,
                                updated_at, priority)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
    ))
    .bind(&s.schedule_id)
    .bind(&s.tenant_id)
    .bind(&s.kind)
    .bind(values.params())
    .bind(&s.cron)
    .bind(&s.timezone)
    .bind(ScheduleValues::at(s.starts_at))
    .bind(ScheduleValues::at(s.ends_at))
    .bind(s.misfire.as_str())
    .bind(s.paused)
    .bind(ScheduleValues::at(s.next_fire_at))
    .bind(ScheduleValues::at(s.last_fire_at))
    .bind(Millis(s.created_at))
    .bind(Millis(s.updated_at))
    .bind(s.priority.as_str())
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn count(conn: &mut SqliteConnection, tenant_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM schedules WHERE tenant_id = $1"))
        .bind(tenant_id)
        .fetch_one(conn)
        .await
}

pub(crate) async fn get(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    schedule_id: &str,
) -> sqlx::Result<Option<ScheduleRow>> {
    sqlx::query_as(sql!(
        "SELECT schedule_id, tenant_id, kind, params, cron, timezone, starts_at, ends_at, misfire,
                priority, paused, next_fire_at, last_fire_at, created_at, updated_at
         FROM schedules WHERE schedule_id = $1 AND tenant_id = $2"
    ))
    .bind(schedule_id)
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

pub(crate) async fn list(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<ScheduleRow>> {
    sqlx::query_as(sql!(
        "SELECT schedule_id, tenant_id, kind, params, cron, timezone, starts_at, ends_at, misfire,
                priority, paused, next_fire_at, last_fire_at, created_at, updated_at
         FROM schedules WHERE tenant_id = $1 AND schedule_id < $2
         ORDER BY schedule_id DESC LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub(crate) async fn replace(
    conn: &mut SqliteConnection,
    values: &ScheduleValues<'_>,
) -> sqlx::Result<u64> {
    let s = values.schedule;
    let done = sqlx::query(sql!(
        "UPDATE schedules SET kind = $3, params = $4, cron = $5, timezone = $6, starts_at = $7,
                              ends_at = $8, misfire = $9, paused = $10, next_fire_at = $11,
                              last_fire_at = $12, updated_at = $13, priority = $14
         WHERE schedule_id = $1 AND tenant_id = $2"
    ))
    .bind(&s.schedule_id)
    .bind(&s.tenant_id)
    .bind(&s.kind)
    .bind(values.params())
    .bind(&s.cron)
    .bind(&s.timezone)
    .bind(ScheduleValues::at(s.starts_at))
    .bind(ScheduleValues::at(s.ends_at))
    .bind(s.misfire.as_str())
    .bind(s.paused)
    .bind(ScheduleValues::at(s.next_fire_at))
    .bind(ScheduleValues::at(s.last_fire_at))
    .bind(Millis(s.updated_at))
    .bind(s.priority.as_str())
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

pub(crate) async fn delete(
    db: impl SqliteExecutor<'_>,
    tenant_id: &str,
    schedule_id: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query(sql!(
        "DELETE FROM schedules WHERE schedule_id = $1 AND tenant_id = $2"
    ))
    .bind(schedule_id)
    .bind(tenant_id)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

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
                           status, schedule_id, fire_at, priority, rank_at)
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), json_extract(value, '$[3]'),
                json_extract(value, '$[4]'), $2, MAX(json_extract(value, '$[6]'), $2), 'QUEUED',
                json_extract(value, '$[5]'), json_extract(value, '$[6]'),
                json_extract(value, '$[7]'), json_extract(value, '$[8]')
         FROM json_each($1) WHERE true
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
         WHERE job_id IN (SELECT json_extract(value, '$[0]') FROM json_each($1))"
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

pub(crate) async fn next_due(db: impl SqliteExecutor<'_>) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT MIN(next_fire_at) FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL"
    ))
    .fetch_one(db)
    .await
}
