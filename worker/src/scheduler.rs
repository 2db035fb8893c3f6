//! The scheduler: fires due schedules into jobs. Every worker pool runs
//! one; the store's transaction per pass (`Store::fire_due_schedules`)
//! and the unique fire of each job keep it to one job per fire however
//! many run, and a pool killed mid-pass leaves its fires to the next pass.

use std::time::Duration;

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
    loop {
        let now = now_ms();
        let pause = match store
            .fire_due_schedules(now, FIRE_BATCH, |schedule| plan(&registry, schedule, now))
            .await
        {
            Ok(fired) => {
                if fired.jobs > 0 {
                    metrics::counter!("receipt_schedule_fires_total").increment(fired.jobs as u64);
                    signals.outbox_changed();
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

/// What the due fire of `schedule` makes at `now`.
fn plan(registry: &Registry, schedule: &Schedule, now: i64) -> FirePlan {
    let Ok(cron) = CronSchedule::parse(&schedule.cron, &schedule.timezone) else {
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
                max_attempts: registry
                    .get(&schedule.kind)
                    .map_or(UNKNOWN_KIND_ATTEMPTS, |kind| kind.max_attempts()),
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
