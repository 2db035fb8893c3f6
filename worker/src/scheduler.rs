//! The scheduler: fires due schedules into jobs. Every worker pool runs
//! one; the store's transaction per pass (`Store::fire_due_schedules`)
//! and the unique fire of each job keep it to one job per fire however
//! many run, and a pool killed mid-pass leaves its fires to the next pass.
//! A fire's job is made up to [`FIRE_AHEAD`] before the fire, due at it.

use std::{collections::HashMap, time::Duration};

use reports::Registry;
use serde_json::Value;
use shared::{
    ids::new_job_id,
    notify::Signals,
    schedule::{CronSchedule, render},
    time::now_ms,
};
use store::{FirePlan, FiredJob, NewJob, Schedule, Store};
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

/// How often the scheduler looks for due schedules when none was due.
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// How long before its fire a fire's job is made: as a job due at the
/// fire (a delayed job, which the relay publishes then), so that many
/// schedules firing in the same minute are all written by their time.
pub const FIRE_AHEAD: Duration = Duration::from_secs(5);
/// Pause after the database did not answer.
const AFTER_ERROR: Duration = Duration::from_secs(1);
/// Schedules fired per transaction.
const FIRE_BATCH: i64 = 500;
/// Attempts of a job whose kind this process does not know: it fails
/// with `unknown_kind` on its first.
const UNKNOWN_KIND_ATTEMPTS: i64 = 1;

pub async fn run_scheduler(
    store: Store,
    registry: Registry,
    signals: Signals,
    stop: CancellationToken,
) {
    let mut crons = Crons::default();
    loop {
        let now = now_ms();
        let until = now + shared::time::duration_ms(FIRE_AHEAD);
        let mut fire_times = Vec::new();
        let pause = match store
            .fire_due_schedules(now, until, FIRE_BATCH, |schedule| {
                let fire = plan(&registry, &mut crons, schedule, now);
                fire_times.extend(fire.job.as_ref().map(|job| job.fire_at));
                fire
            })
            .await
        {
            Ok(fired) => {
                if fired.jobs > 0 {
                    metrics::counter!("receipt_schedule_fires_total").increment(fired.jobs as u64);
                    signals.outbox_changed();
                }
                // How late each fire's job was made: 0 when made ahead of
                // its fire, as it is while the scheduler keeps up.
                for fire_at in fire_times {
                    let late_ms = (now - fire_at).max(0);
                    metrics::histogram!("receipt_schedule_lateness_seconds")
                        .record(late_ms as f64 / 1000.0);
                }
                // A full batch may have left more due.
                if fired.schedules as i64 >= FIRE_BATCH {
                    Duration::ZERO
                } else {
                    LOOK_EVERY
                }
            }
            Err(e) => {
                warn!(error = %e, "firing due schedules failed; trying again");
                AFTER_ERROR
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Parsed cron expressions by (expression, zone): many schedules share a
/// few, and a pass parses each once. Emptied when it grows past a bound.
#[derive(Default)]
struct Crons(HashMap<(String, String), Option<CronSchedule>>);

impl Crons {
    const MOST: usize = 4096;

    fn get(&mut self, schedule: &Schedule) -> Option<CronSchedule> {
        let key = (schedule.cron.clone(), schedule.timezone.clone());
        if let Some(cron) = self.0.get(&key) {
            return cron.clone();
        }
        if self.0.len() >= Self::MOST {
            self.0.clear();
        }
        let cron = CronSchedule::parse(&schedule.cron, &schedule.timezone).ok();
        self.0.insert(key, cron.clone());
        cron
    }
}

/// What the due fire of `schedule` makes at `now`.
fn plan(registry: &Registry, crons: &mut Crons, schedule: &Schedule, now: i64) -> FirePlan {
    let Some(cron) = crons.get(schedule) else {
        // Checked when it was written; a time zone database that no longer
        // knows its zone stops it rather than firing at a wrong time.
        error!(schedule_id = %schedule.schedule_id, "a stored schedule no longer parses; it stops");
        return FirePlan {
            job: None,
            next_fire_at: None,
        };
    };
    let due = schedule.next_fire_at.unwrap_or(now);
    let decision = cron.decide(due, now, schedule.misfire, schedule.ends_at);
    let job = decision.fire_at.map(|fire_at| {
        let template: Value = serde_json::from_str(&schedule.params).unwrap_or(Value::Null);
        FiredJob {
            job: NewJob {
                job_id: new_job_id(),
                tenant_id: schedule.tenant_id.clone(),
                kind: schedule.kind.clone(),
                params: render(&template, fire_at, cron.zone()).to_string(),
                // A kind the tenant registered: its attempts, and that it is
                // external, are read with the fire's insert (the kind's
                // row), as this process knows only the built-in kinds.
                max_attempts: registry
                    .get(&schedule.kind)
                    .map_or(UNKNOWN_KIND_ATTEMPTS, |kind| kind.max_attempts()),
                priority: schedule.priority,
                external: false,
            },
            schedule_id: schedule.schedule_id.clone(),
            fire_at,
        }
    });
    FirePlan {
        job,
        next_fire_at: decision.next_fire_at,
    }
}
