//! Schedules: the rows its statements read and write.

use crate::Schedule;
use crate::{
    NewJob,
    sql::{JsonText, Millis},
};

/// A schedule's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScheduleRow {
    pub(crate) schedule_id: String,
    pub(crate) tenant_id: String,
    pub(crate) kind: String,
    pub(crate) params: JsonText,
    pub(crate) cron: String,
    pub(crate) timezone: String,
    pub(crate) starts_at: Option<Millis>,
    pub(crate) ends_at: Option<Millis>,
    pub(crate) misfire: String,
    pub(crate) priority: String,
    pub(crate) paused: bool,
    pub(crate) next_fire_at: Option<Millis>,
    pub(crate) last_fire_at: Option<Millis>,
    pub(crate) created_at: Millis,
    pub(crate) updated_at: Millis,
}

/// A schedule's values as the statements bind them.
pub(crate) struct ScheduleValues<'a> {
    pub(crate) schedule: &'a Schedule,
}

/// A job a fire makes.
#[derive(Debug, Clone)]
pub struct FiredJob {
    pub job: NewJob,
    pub schedule_id: String,
    pub fire_at: i64,
}

/// A fired schedule's new times.
pub(crate) struct ScheduleMove {
    pub(crate) schedule_id: String,
    pub(crate) next_fire_at: Option<i64>,
    pub(crate) last_fire_at: Option<i64>,
}
