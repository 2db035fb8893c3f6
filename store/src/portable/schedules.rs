//! Schedules, the statements written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::{Conn, Db};
use crate::{
    rows::schedules::{ScheduleRow, ScheduleValues},
    sql::Millis,
};

pub(crate) async fn insert(
    conn: &mut Conn,
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

pub(crate) async fn count(conn: &mut Conn, tenant_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!("SELECT COUNT(*) FROM schedules WHERE tenant_id = $1"))
        .bind(tenant_id)
        .fetch_one(conn)
        .await
}

pub(crate) async fn get(
    db: impl Executor<'_, Database = Db>,
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
    db: impl Executor<'_, Database = Db>,
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
    conn: &mut Conn,
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
    db: impl Executor<'_, Database = Db>,
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

pub(crate) async fn next_due(db: impl Executor<'_, Database = Db>) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT MIN(next_fire_at) FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL"
    ))
    .fetch_one(db)
    .await
}
