//! Scenario `offered`: a fixed rate of `sleep` jobs, open loop, for a
//! while; what each job's life took from its scheduled submit to its
//! success, read from its own timestamps, and the queue's depth every
//! second. Also a short ramp that finds roughly the highest rate a shape
//! sustains (`--rates max`).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Result, bail};
use serde_json::{Value, json};
use sqlx::{AnyPool, Row};
use tokio::{
    sync::{Semaphore, mpsc, oneshot, watch},
    time::Instant,
};

use crate::{
    CpuMeter, Shape, Target,
    plot::{Depth, Second},
    sleep,
    stats::percentile,
};

/// A submit sent this much after its scheduled time counts as late: the
/// bench's own driver fell behind (a busy machine), not the service.
const LATE_MS: f64 = 10.0;

/// How the load is offered and how long the jobs may take to drain.
pub struct Options {
    /// Each job's `ms`.
    pub job_ms: u64,
    /// Submits awaiting their answer at once, at most: a submit due while
    /// this many wait is not sent, and is counted as unsent.
    pub max_in_flight: usize,
    /// After the last submit, how long to wait for every accepted job to
    /// finish before counting the rest as unfinished.
    pub drain_secs: u64,
}

/// What one run at one rate measured.
pub struct Offered {
    pub line: Value,
    pub seconds: Vec<Second>,
    pub depth: Vec<Depth>,
    /// Every submit sent on time and accepted, every job done, at least
    /// 95% of them within the window, and the rest within 2 s after it.
    pub sustained: bool,
}

/// One submit's outcome.
struct Sent {
    index: usize,
    answer: std::result::Result<String, String>,
    submit_ms: f64,
}

/// What the table says of one job, in unix milliseconds.
struct Times {
    status: String,
    created: f64,
    started: Option<f64>,
    finished: Option<f64>,
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Offers `rate` jobs a second for `secs` seconds to `target`, then waits
/// for them to finish and reads their times.
pub async fn run(target: &Target<'_>, rate: f64, secs: u64, options: &Options) -> Result<Offered> {
    if !(rate > 0.0 && rate.is_finite()) {
        bail!("a rate must be a positive number of jobs per second, not {rate}");
    }
    let pool = target.pool().await?;
    let meter = CpuMeter::start(&target.watched, &pool).await?;
    let total = (rate * secs as f64).round() as usize;
    // The scheduled times in both clocks: the monotonic one to send by,
    // the wall clock (the one the service stamps its jobs with, on the
    // same machine) to measure each job's life from.
    let lead = Duration::from_millis(100);
    let (start, start_ms) = (
        Instant::now() + lead,
        unix_ms() + lead.as_secs_f64() * 1000.0,
    );
    let sampler = Sampler::start(pool.clone(), target.tenant, start);
    let permits = Arc::new(Semaphore::new(options.max_in_flight));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut unsent, mut late) = (0_usize, 0_usize);
    let mut lags = Vec::with_capacity(total);
    for index in 0..total {
        let scheduled = start + Duration::from_secs_f64(index as f64 / rate);
        tokio::time::sleep_until(scheduled).await;
        let lag = scheduled.elapsed().as_secs_f64() * 1000.0;
        lags.push(lag);
        if lag > LATE_MS {
            late += 1;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            unsent += 1;
            continue;
        };
        let (client, tx) = (target.client.clone(), tx.clone());
        let job = sleep(options.job_ms);
        tokio::spawn(async move {
            let sent = Instant::now();
            let answer = client
                .submit(job)
                .await
                .map(|job| job.job_id)
                .map_err(|error| format!("{error:#}"));
            let submit_ms = sent.elapsed().as_secs_f64() * 1000.0;
            let _ = tx.send(Sent {
                index,
                answer,
                submit_ms,
            });
            drop(permit);
        });
    }
    drop(tx);
    let mut sent = Vec::with_capacity(total);
    while let Some(one) = rx.recv().await {
        sent.push(one);
    }
    let sending_s = start.elapsed().as_secs_f64();

    // The drain ends at the sampler's first count of no job left taken
    // after the last submit was answered: the bench adds no query of its
    // own to the database it measures.
    let drain_started = Instant::now();
    let deadline = drain_started + Duration::from_secs(options.drain_secs);
    let mut left = sampler.left.clone();
    loop {
        if matches!(*left.borrow_and_update(), Some((taken, 0)) if taken >= drain_started) {
            break;
        }
        tokio::select! {
            changed = left.changed() => if changed.is_err() {
                // The sampler stopped on an error, which its stop returns.
                break;
            },
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let depth = sampler.stop().await?;

    let errors: Vec<&String> = sent
        .iter()
        .filter_map(|s| s.answer.as_ref().err())
        .collect();
    for error in errors.iter().take(5) {
        eprintln!("# submit failed: {error}");
    }
    let accepted: Vec<(&Sent, &String)> = sent
        .iter()
        .filter_map(|s| s.answer.as_ref().ok().map(|id| (s, id)))
        .collect();
    let cpu = meter.per_job(&pool, accepted.len().max(1)).await?;
    let times = read_times(&pool, target, accepted.iter().map(|(_, id)| id.as_str())).await?;
    pool.close().await;

    let window_end_ms = start_ms + secs as f64 * 1000.0;
    let mut end_to_end = Vec::with_capacity(accepted.len());
    let mut pickup = Vec::with_capacity(accepted.len());
    let mut by_second = vec![Vec::new(); secs as usize];
    let (mut succeeded, mut failed, mut done_in_window) = (0_usize, 0_usize, 0_usize);
    let mut last_finished = start_ms;
    for (one, id) in &accepted {
        let scheduled_ms = start_ms + one.index as f64 * 1000.0 / rate;
        let Some(job) = times.get(*id) else {
            end_to_end.push(f64::INFINITY);
            continue;
        };
        if let Some(started) = job.started {
            pickup.push(started - job.created);
        }
        match (job.status.as_str(), job.finished) {
            ("SUCCEEDED", Some(finished)) => {
                succeeded += 1;
                let ms = finished - scheduled_ms;
                end_to_end.push(ms);
                let second = (one.index as f64 / rate) as usize;
                if let Some(bucket) = by_second.get_mut(second) {
                    bucket.push(ms);
                }
                done_in_window += usize::from(finished <= window_end_ms);
                last_finished = last_finished.max(finished);
            }
            (status, _) => {
                failed += usize::from(status == "FAILED" || status == "CANCELLED");
                end_to_end.push(f64::INFINITY);
            }
        }
    }
    let unfinished = accepted.len() - succeeded - failed;
    end_to_end.sort_by(f64::total_cmp);
    pickup.sort_by(f64::total_cmp);
    let mut submit: Vec<f64> = sent.iter().map(|s| s.submit_ms).collect();
    submit.sort_by(f64::total_cmp);
    lags.sort_by(f64::total_cmp);
    let seconds: Vec<Second> = by_second
        .iter_mut()
        .enumerate()
        .map(|(at, bucket)| {
            bucket.sort_by(f64::total_cmp);
            let at_p = |p| (!bucket.is_empty()).then(|| percentile(bucket, p));
            Second {
                at: at as f64,
                p50_ms: at_p(0.5),
                p99_ms: at_p(0.99),
            }
        })
        .collect();
    let in_window: Vec<&Depth> = depth.iter().filter(|d| d.at <= secs as f64).collect();
    let mean = |pick: fn(&Depth) -> i64| {
        in_window.iter().map(|d| pick(d) as f64).sum::<f64>() / in_window.len().max(1) as f64
    };
    let most = |pick: fn(&Depth) -> i64| in_window.iter().map(|d| pick(d)).max().unwrap_or(0);
    let (queued_mean, queued_max) = (mean(|d| d.queued), most(|d| d.queued));
    let (running_mean, running_max) = (mean(|d| d.running), most(|d| d.running));
    let after_window_s = ((last_finished - window_end_ms) / 1000.0).max(0.0);
    let sustained = unsent == 0
        && errors.is_empty()
        && unfinished == 0
        && failed == 0
        && done_in_window as f64 >= 0.95 * accepted.len() as f64
        && after_window_s <= 2.0;
    // Infinite (unfinished) figures go out as null.
    let ms = |v: f64| {
        if v.is_finite() {
            json!((v * 10.0).round() / 10.0)
        } else {
            Value::Null
        }
    };
    let line = json!({
        "rate": rate,
        "secs": secs,
        "job_ms": options.job_ms,
        "slots": target.slots,
        "layout": target.layout(),
        "scheduled": total,
        "unsent": unsent,
        "max_in_flight": options.max_in_flight,
        "late": late,
        "driver_lag_p99_ms": ms(percentile(&lags, 0.99)),
        "errors": errors.len(),
        "accepted": accepted.len(),
        "succeeded": succeeded,
        "failed": failed,
        "unfinished": unfinished,
        "sent_per_s": sent.len() as f64 / sending_s,
        "completed_per_s": done_in_window as f64 / secs as f64,
        "last_done_after_window_s": after_window_s,
        "drain_waited_s": drain_s,
        "end_to_end_measured_from": "scheduled submit (wall clock) to the job's finished_at",
        "end_to_end_p50_ms": ms(percentile(&end_to_end, 0.5)),
        "end_to_end_p99_ms": ms(percentile(&end_to_end, 0.99)),
        "end_to_end_p999_ms": ms(percentile(&end_to_end, 0.999)),
        "end_to_end_max_ms": ms(end_to_end.last().copied().unwrap_or(f64::NAN)),
        "pickup_p50_ms": ms(percentile(&pickup, 0.5)),
        "pickup_p99_ms": ms(percentile(&pickup, 0.99)),
        "submit_p99_ms": ms(percentile(&submit, 0.99)),
        "queued_mean": queued_mean,
        "queued_max": queued_max,
        "running_mean": running_mean,
        "running_max": running_max,
        "cpu_ms_per_job": cpu,
        "by_second": {
            "end_to_end_p50_ms": seconds.iter().map(|s| s.p50_ms.map_or(Value::Null, ms)).collect::<Vec<_>>(),
            "end_to_end_p99_ms": seconds.iter().map(|s| s.p99_ms.map_or(Value::Null, ms)).collect::<Vec<_>>(),
            "queued": depth.iter().map(|d| d.queued).collect::<Vec<_>>(),
            "running": depth.iter().map(|d| d.running).collect::<Vec<_>>(),
        },
    });
    Ok(Offered {
        line,
        seconds,
        depth,
        sustained,
    })
}

/// The times of the jobs `ids` (all of `target`'s tenant), by id.
async fn read_times<'a>(
    pool: &AnyPool,
    target: &Target<'_>,
    ids: impl Iterator<Item = &'a str>,
) -> Result<HashMap<String, Times>> {
    let Some(first) = ids.min() else {
        return Ok(HashMap::new());
    };
    let sql = match target.dialect {
        Shape::Production => {
            "SELECT job_id, status,
               (EXTRACT(EPOCH FROM created_at) * 1000)::float8 AS created,
               (EXTRACT(EPOCH FROM started_at) * 1000)::float8 AS started,
               (EXTRACT(EPOCH FROM finished_at) * 1000)::float8 AS finished
             FROM jobs WHERE tenant_id = $1 AND job_id >= $2"
        }
        Shape::Embedded => {
            "SELECT job_id, status, CAST(created_at AS REAL) AS created,
               CAST(started_at AS REAL) AS started, CAST(finished_at AS REAL) AS finished
             FROM jobs WHERE tenant_id = $1 AND job_id >= $2"
        }
    };
    let rows = sqlx::query(sql)
        .bind(target.tenant)
        .bind(first)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<String, _>("job_id")?,
                Times {
                    status: row.try_get("status")?,
                    created: row.try_get("created")?,
                    started: row.try_get("started")?,
                    finished: row.try_get("finished")?,
                },
            ))
        })
        .collect()
}

/// Counts the tenant's QUEUED and RUNNING jobs once a second, on the
/// watcher's one connection, until stopped.
struct Sampler {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Vec<Depth>>>,
    /// The last count's start and the jobs it found QUEUED or RUNNING.
    left: watch::Receiver<Option<(Instant, i64)>>,
}

impl Sampler {
    fn start(pool: AnyPool, tenant: &'static str, start: Instant) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let (counted, left) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut every = tokio::time::interval_at(start, Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(samples),
                    _ = every.tick() => {}
                }
                let taken = Instant::now();
                let rows = sqlx::query(
                    "SELECT status, COUNT(*) AS n FROM jobs
                     WHERE tenant_id = $1 AND status IN ('QUEUED', 'RUNNING') GROUP BY status",
                )
                .bind(tenant)
                .fetch_all(&pool)
                .await?;
                let mut sample = Depth {
                    at: start.elapsed().as_secs_f64(),
                    queued: 0,
                    running: 0,
                };
                for row in &rows {
                    let n: i64 = row.try_get("n")?;
                    match row.try_get::<String, _>("status")?.as_str() {
                        "QUEUED" => sample.queued = n,
                        _ => sample.running = n,
                    }
                }
                counted.send_replace(Some((taken, sample.queued + sample.running)));
                samples.push(sample);
            }
        });
        Sampler { stop, task, left }
    }

    async fn stop(self) -> Result<Vec<Depth>> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

/// `--rates max`: offers 100 jobs/s for `step_secs`, doubling while the
/// target sustains it (see [`Offered::sustained`]), then halves the gap
/// between the last rate sustained and the first not, twice. Answers the
/// highest rate sustained (within a quarter of the one found by a finer
/// search) and each step as a JSON line.
pub async fn find_max(
    target: &Target<'_>,
    step_secs: u64,
    options: &Options,
) -> Result<(f64, Vec<Value>)> {
    const FIRST: f64 = 100.0;
    const CEILING: f64 = 100_000.0;
    let mut steps = Vec::new();
    let step = async |rate: f64, steps: &mut Vec<Value>| -> Result<bool> {
        let run = run(target, rate, step_secs, options).await?;
        println!(
            "# ramp {rate:.0}/s for {step_secs} s: {} (completed {:.0}/s, unsent {}, end to end p99 {} ms)",
            if run.sustained {
                "sustained"
            } else {
                "not sustained"
            },
            run.line["completed_per_s"].as_f64().unwrap_or_default(),
            run.line["unsent"],
            run.line["end_to_end_p99_ms"],
        );
        steps.push(json!({"rate": rate, "sustained": run.sustained, "completed_per_s": run.line["completed_per_s"],
                          "end_to_end_p99_ms": run.line["end_to_end_p99_ms"]}));
        Ok(run.sustained)
    };
    let (mut good, mut bad) = (None, None);
    let mut rate = FIRST;
    while rate <= CEILING {
        if step(rate, &mut steps).await? {
            good = Some(rate);
            rate *= 2.0;
        } else {
            bad = Some(rate);
            break;
        }
    }
    let Some(mut good) = good else {
        bail!("not even {FIRST} jobs/s sustained for {step_secs} s");
    };
    if let Some(mut bad) = bad {
        for _ in 0..2 {
            let middle = ((good + bad) / 2.0).round();
            if step(middle, &mut steps).await? {
                good = middle;
            } else {
                bad = middle;
            }
        }
    }
    Ok((good, steps))
}
