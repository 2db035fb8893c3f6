//! Schedules on Postgres.

use sqlx::{PgConnection, PgExecutor};

use crate::{
    schedules::{FiredJob, ScheduleMove, ScheduleRow, ScheduleValues},
    sql::{JsonText, Millis},
};

pub(crate) async fn insert(
    conn: &mut PgConnection,
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

pub(crate) async fn lock_tenant(conn: &mut PgConnection, tenant_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
    ))
    .bind(format!("schedules:{tenant_id}"))
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn count(conn: &mut PgConnection, tenant_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM schedules WHERE tenant_id = $1"))
        .bind(tenant_id)
        .fetch_one(conn)
        .await
}

pub(crate) async fn get(
    db: impl PgExecutor<'_>,
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

pub(crate) async fn lock(
    conn: &mut PgConnection,
    tenant_id: &str,
    schedule_id: &str,
) -> sqlx::Result<Option<ScheduleRow>> {
    sqlx::query_as(sql!(
        "SELECT schedule_id, tenant_id, kind, params, cron, timezone, starts_at, ends_at, misfire,
                priority, paused, next_fire_at, last_fire_at, created_at, updated_at
         FROM schedules WHERE schedule_id = $1 AND tenant_id = $2 FOR UPDATE"
    ))
    .bind(schedule_id)
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

pub(crate) async fn list(
    db: impl PgExecutor<'_>,
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
    conn: &mut PgConnection,
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
    db: impl PgExecutor<'_>,
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

/// Schedules due by `until`, locked; those another scheduler holds are
/// skipped.
pub(crate) async fn lock_due(
    conn: &mut PgConnection,
    until: Millis,
    limit: i64,
) -> sqlx::Result<Vec<ScheduleRow>> {
    sqlx::query_as(sql!(
        "SELECT schedule_id, tenant_id, kind, params, cron, timezone, starts_at, ends_at, misfire,
                priority, paused, next_fire_at, last_fire_at, created_at, updated_at
         FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= $1
         ORDER BY next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED"
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
    conn: &mut PgConnection,
    jobs: &[FiredJob],
    ranks: &[Millis],
    now: Millis,
) -> sqlx::Result<usize> {
    let made: Vec<String> = sqlx::query_scalar(sql!(
        "WITH inserted AS (
             INSERT INTO jobs (job_id, tenant_id, kind, params, max_attempts, created_at,
                               run_after, status, schedule_id, fire_at, priority, rank_at)
             SELECT job_id, tenant_id, kind, params, max_attempts, $1, GREATEST(fire_at, $1),
                    'QUEUED', schedule_id, fire_at, priority, rank_at
             FROM UNNEST($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bigint[],
                         $7::text[], $8::timestamptz[], $9::text[], $10::timestamptz[])
                 AS s (job_id, tenant_id, kind, params, max_attempts, schedule_id, fire_at,
                       priority, rank_at)
             ON CONFLICT (schedule_id, fire_at) WHERE schedule_id IS NOT NULL DO NOTHING
             RETURNING job_id, run_after, rank_at
         ), queued AS (
             INSERT INTO outbox (job_id, publish_at, republish_ms, rank_at)
             SELECT job_id, run_after, 0, rank_at FROM inserted
         )
         SELECT job_id FROM inserted"
    ))
    .bind(now)
    .bind(
        jobs.iter()
            .map(|j| j.job.job_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        jobs.iter()
            .map(|j| j.job.tenant_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(jobs.iter().map(|j| j.job.kind.as_str()).collect::<Vec<_>>())
    .bind(
        jobs.iter()
            .map(|j| JsonText(j.job.params.clone()))
            .collect::<Vec<_>>(),
    )
    .bind(jobs.iter().map(|j| j.job.max_attempts).collect::<Vec<_>>())
    .bind(
        jobs.iter()
            .map(|j| j.schedule_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(jobs.iter().map(|j| Millis(j.fire_at)).collect::<Vec<_>>())
    .bind(
        jobs.iter()
            .map(|j| j.job.priority.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(ranks)
    .fetch_all(conn)
    .await?;
    Ok(made.len())
}

pub(crate) async fn move_on(conn: &mut PgConnection, moves: &[ScheduleMove]) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE schedules SET next_fire_at = m.next_fire_at, last_fire_at = m.last_fire_at
         FROM UNNEST($1::text[], $2::timestamptz[], $3::timestamptz[])
             AS m (schedule_id, next_fire_at, last_fire_at)
         WHERE schedules.schedule_id = m.schedule_id"
    ))
    .bind(
        moves
            .iter()
            .map(|m| m.schedule_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        moves
            .iter()
            .map(|m| m.next_fire_at.map(Millis))
            .collect::<Vec<_>>(),
    )
    .bind(
        moves
            .iter()
            .map(|m| m.last_fire_at.map(Millis))
            .collect::<Vec<_>>(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn next_due(db: impl PgExecutor<'_>) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT MIN(next_fire_at) FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL"
    ))
    .fetch_one(db)
    .await
}
