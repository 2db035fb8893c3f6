//! Schedules on Postgres.

use sqlx::PgConnection;

use crate::{
    rows::schedules::{FiredJob, ScheduleMove, ScheduleRow},
    sql::{JsonText, Millis},
};

pub(crate) use crate::portable::postgres::schedules::*;

pub(crate) async fn lock_tenant(conn: &mut PgConnection, tenant_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
    ))
    .bind(format!("schedules:{tenant_id}"))
    .execute(conn)
    .await?;
    Ok(())
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
/// fire past) and handed to the queue then (`queue_jobs`); a fire that
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
                               run_after, status, schedule_id, fire_at, priority, rank_at,
                               external)
             SELECT s.job_id, s.tenant_id, s.kind, s.params,
                    COALESCE(k.max_attempts, s.max_attempts), $1, GREATEST(s.fire_at, $1),
                    'QUEUED', s.schedule_id, s.fire_at, s.priority, s.rank_at,
                    k.name IS NOT NULL
             FROM UNNEST($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bigint[],
                         $7::text[], $8::timestamptz[], $9::text[], $10::timestamptz[])
                 AS s (job_id, tenant_id, kind, params, max_attempts, schedule_id, fire_at,
                       priority, rank_at)
             LEFT JOIN registered_kinds k
                 ON k.tenant_id = s.tenant_id AND k.name = s.kind AND k.deleted_at IS NULL
             ON CONFLICT (schedule_id, fire_at) WHERE schedule_id IS NOT NULL DO NOTHING
             RETURNING job_id, run_after, rank_at
         ), queued AS (
             SELECT queue_jobs(array_agg(job_id), array_agg(run_after), array_agg(rank_at))
             FROM inserted
         )
         SELECT job_id FROM inserted, queued"
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
