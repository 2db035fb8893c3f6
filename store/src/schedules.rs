//! Recurring schedules and their fires. A fire makes its job in the
//! transaction that moves the schedule's `next_fire_at` on, and the job
//! carries `(schedule_id, fire_at)` under a unique index: one job per
//! fire, however many processes fire and wherever one of them dies.

use shared::{model::Priority, schedule::Misfire};

use crate::{
    Actor, AuditAction, AuditChange, Error, Result, Store, WriteTx, on_pool, on_tx, postgres,
    sql::{JsonText, Millis},
    sqlite,
};

pub use crate::rows::schedules::FiredJob;
pub(crate) use crate::rows::schedules::{ScheduleMove, ScheduleRow, ScheduleValues};

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub schedule_id: String,
    pub tenant_id: String,
    pub kind: String,
    /// The params template, JSON text.
    pub params: String,
    pub cron: String,
    pub timezone: String,
    pub starts_at: Option<i64>,
    pub ends_at: Option<i64>,
    pub misfire: Misfire,
    /// The priority of the jobs it makes.
    pub priority: Priority,
    pub paused: bool,
    /// The fire a scheduler takes next; `None` once none is left.
    pub next_fire_at: Option<i64>,
    pub last_fire_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = Error;

    fn try_from(row: ScheduleRow) -> Result<Schedule> {
        Ok(Schedule {
            misfire: Misfire::parse(&row.misfire)
                .ok_or_else(|| Error::Corrupt(format!("schedule misfire {:?}", row.misfire)))?,
            priority: Priority::parse(&row.priority)
                .ok_or_else(|| Error::Corrupt(format!("schedule priority {:?}", row.priority)))?,
            schedule_id: row.schedule_id,
            tenant_id: row.tenant_id,
            kind: row.kind,
            params: row.params.into(),
            cron: row.cron,
            timezone: row.timezone,
            starts_at: row.starts_at.map(i64::from),
            ends_at: row.ends_at.map(i64::from),
            paused: row.paused,
            next_fire_at: row.next_fire_at.map(i64::from),
            last_fire_at: row.last_fire_at.map(i64::from),
            created_at: row.created_at.into(),
            updated_at: row.updated_at.into(),
        })
    }
}

impl ScheduleValues<'_> {
    pub(crate) fn params(&self) -> JsonText {
        JsonText(self.schedule.params.clone())
    }

    pub(crate) fn at(value: Option<i64>) -> Option<Millis> {
        value.map(Millis)
    }
}

/// What a fire of a due schedule does: the job it makes (if any: a missed
/// fire skipped makes none) and the schedule's next fire.
#[derive(Debug, Clone)]
pub struct FirePlan {
    pub job: Option<FiredJob>,
    pub next_fire_at: Option<i64>,
}

/// What one pass of [`Store::fire_due_schedules`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fired {
    /// Due schedules taken.
    pub schedules: usize,
    /// Jobs made.
    pub jobs: usize,
}

impl Store {
    pub async fn create_schedule(&self, tx: &mut WriteTx, schedule: &Schedule) -> Result<()> {
        let values = ScheduleValues { schedule };
        on_tx!(tx,
            conn => postgres::schedules::insert(conn, &values).await?,
            conn => sqlite::schedules::insert(conn, &values).await?,
        );
        Ok(())
    }

    /// The tenant's schedules, counted under the tenant's schedule lock
    /// (Postgres; SQLite has one writer at a time), so that a cap checked
    /// with it holds against concurrent creates.
    pub async fn count_schedules(&self, tx: &mut WriteTx, tenant_id: &str) -> Result<i64> {
        Ok(on_tx!(tx,
            conn => {
                postgres::schedules::lock_tenant(conn, tenant_id).await?;
                postgres::schedules::count(conn, tenant_id).await?
            },
            conn => sqlite::schedules::count(conn, tenant_id).await?,
        ))
    }

    pub async fn get_schedule(
        &self,
        tenant_id: &str,
        schedule_id: &str,
    ) -> Result<Option<Schedule>> {
        on_pool!(self,
            pool => postgres::schedules::get(pool, tenant_id, schedule_id).await?,
            pool => sqlite::schedules::get(pool, tenant_id, schedule_id).await?,
        )
        .map(Schedule::try_from)
        .transpose()
    }

    /// The schedule, held until `tx` ends, for a change that reads it first.
    pub async fn lock_schedule(
        &self,
        tx: &mut WriteTx,
        tenant_id: &str,
        schedule_id: &str,
    ) -> Result<Option<Schedule>> {
        on_tx!(tx,
            conn => postgres::schedules::lock(conn, tenant_id, schedule_id).await?,
            conn => sqlite::schedules::get(conn, tenant_id, schedule_id).await?,
        )
        .map(Schedule::try_from)
        .transpose()
    }

    /// Newest first, ids before `before`: a page of `limit` and one more,
    /// which tells whether another page follows.
    pub async fn list_schedules(
        &self,
        tenant_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Schedule>> {
        // Above every id: `sch_` and hex digits sort below `~`.
        let before = before.unwrap_or("~");
        on_pool!(self,
            pool => postgres::schedules::list(pool, tenant_id, before, limit + 1).await?,
            pool => sqlite::schedules::list(pool, tenant_id, before, limit + 1).await?,
        )
        .into_iter()
        .map(Schedule::try_from)
        .collect()
    }

    /// Writes every value of `schedule` over its row; `false` when it is gone.
    pub async fn replace_schedule(&self, tx: &mut WriteTx, schedule: &Schedule) -> Result<bool> {
        let values = ScheduleValues { schedule };
        Ok(on_tx!(tx,
            conn => postgres::schedules::replace(conn, &values).await?,
            conn => sqlite::schedules::replace(conn, &values).await?,
        ) > 0)
    }

    /// Deletes the schedule; its jobs stay. `false` when there was none.
    pub async fn delete_schedule(
        &self,
        tenant_id: &str,
        schedule_id: &str,
        actor: &Actor,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let deleted = on_tx!(tx,
            conn => postgres::schedules::delete(conn, tenant_id, schedule_id).await?,
            conn => sqlite::schedules::delete(conn, tenant_id, schedule_id).await?,
        ) > 0;
        if deleted {
            let change = AuditChange {
                tenant_id: Some(tenant_id),
                action: AuditAction::ScheduleDeleted,
                target: Some(schedule_id),
                details: serde_json::json!({}),
            };
            self.audit(&mut tx, actor, &change).await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Fires up to `limit` schedules whose next fire is at `until` or
    /// before, in one transaction at `now`: `plan` says what each fire
    /// makes; its jobs (each due at its fire, or at once for a fire past)
    /// and the schedules' next fires commit together. Concurrent
    /// schedulers take different schedules (`SKIP LOCKED` on Postgres;
    /// SQLite has one writer), and a job for a fire that already has one
    /// is not made.
    pub async fn fire_due_schedules(
        &self,
        now: i64,
        until: i64,
        limit: i64,
        mut plan: impl FnMut(&Schedule) -> FirePlan,
    ) -> Result<Fired> {
        let at = Millis(now);
        // A look before the transaction: most passes find nothing due.
        if self
            .next_schedule_due()
            .await?
            .is_none_or(|due| due > until)
        {
            return Ok(Fired::default());
        }
        let mut tx = self.begin_write().await?;
        let due: Vec<Schedule> = on_tx!(tx,
            conn => postgres::schedules::lock_due(conn, Millis(until), limit).await?,
            conn => sqlite::schedules::due(conn, Millis(until), limit).await?,
        )
        .into_iter()
        .map(Schedule::try_from)
        .collect::<Result<_>>()?;
        if due.is_empty() {
            return Ok(Fired::default());
        }
        let mut jobs = Vec::new();
        let mut moves = Vec::with_capacity(due.len());
        for schedule in &due {
            let fire = plan(schedule);
            let fired_at = fire.job.as_ref().map(|job| job.fire_at);
            if let Some(job) = fire.job {
                jobs.push(job);
            }
            moves.push(ScheduleMove {
                schedule_id: schedule.schedule_id.clone(),
                next_fire_at: fire.next_fire_at,
                last_fire_at: fired_at.or(schedule.last_fire_at),
            });
        }
        let made = if jobs.is_empty() {
            0
        } else {
            let ranks: Vec<Millis> = jobs
                .iter()
                .map(|j| {
                    Millis(
                        j.job
                            .priority
                            .rank_at(j.fire_at.max(now), self.priority_aging),
                    )
                })
                .collect();
            on_tx!(tx,
                conn => postgres::schedules::insert_fired_jobs(conn, &jobs, &ranks, at).await?,
                conn => sqlite::schedules::insert_fired_jobs(conn, &jobs, &ranks, at).await?,
            )
        };
        shared::failpoints::crash_if_armed("store::schedule_fired_before_commit");
        on_tx!(tx,
            conn => postgres::schedules::move_on(conn, &moves).await?,
            conn => sqlite::schedules::move_on(conn, &moves).await?,
        );
        tx.commit().await?;
        Ok(Fired {
            schedules: due.len(),
            jobs: made,
        })
    }

    /// When the next schedule is due, if one is.
    pub async fn next_schedule_due(&self) -> Result<Option<i64>> {
        Ok(on_pool!(self,
            pool => postgres::schedules::next_due(pool).await?,
            pool => sqlite::schedules::next_due(pool).await?,
        )
        .map(i64::from))
    }
}
