//! Scenario: backlog. A closed-loop e2e run measures the shape's rate;
//! then its worker pools stop, `--backlog-jobs` jobs are submitted, and new
//! pools start: how fast a queue that is already deep drains, against the
//! rate of a queue a few jobs deep. The drain is timed from the start of
//! the new pools (their start-up included) until no job of the backlog
//! waits or runs.

use std::time::Instant;

use anyhow::Result;
use serde_json::{Value, json};

use crate::{
    Args, CpuMeter, KEY, Service, Shape, bench_client, cpu_summary, end_to_end, submit_all,
    until_none_waiting,
};

pub(crate) async fn backlog(service: &mut Service, args: &Args) -> Result<Value> {
    let clients = args.clients.unwrap_or(args.concurrency);
    let closed_loop = end_to_end(&service.target(), args.jobs, clients).await?;

    stop_pools(service).await?;
    let submitted = Instant::now();
    let first_id = submit_all(&service.client, args.backlog_jobs, clients).await?;
    let submit_s = submitted.elapsed().as_secs_f64();
    println!(
        "# backlog: {} jobs waiting after {submit_s:.1} s",
        args.backlog_jobs
    );

    let pool = service.pool().await?;
    let started = Instant::now();
    start_pools(service, args).await?;
    let target = service.target();
    let meter = CpuMeter::start(&target.watched, &pool).await?;
    let drained = until_none_waiting(&target, &pool, &first_id, args.backlog_jobs, started).await?;
    let cpu = meter.per_job(&pool, args.backlog_jobs).await?;
    pool.close().await;
    let drain_per_s = args.backlog_jobs as f64 / drained.as_secs_f64();
    println!("# backlog: drained in {:.1} s", drained.as_secs_f64());
    Ok(json!({
        "backlog": args.backlog_jobs,
        "submit_s": submit_s,
        "drain_jobs_per_s": drain_per_s,
        "e2e_jobs_per_s": closed_loop.jobs_per_s,
        "share": drain_per_s / closed_loop.jobs_per_s,
        "cpu_ms_per_job": cpu,
        "e2e_cpu_ms_per_job": closed_loop.cpu_ms_per_job,
    }))
}

/// One line of the scenario's result.
pub(crate) fn summary(result: &Value) -> String {
    format!(
        "{:>8.0} jobs/s draining {} = {:.0}% of e2e {:.0}\n{:>25}CPU ms per job: {}",
        result["drain_jobs_per_s"].as_f64().unwrap_or_default(),
        result["backlog"],
        100.0 * result["share"].as_f64().unwrap_or_default(),
        result["e2e_jobs_per_s"].as_f64().unwrap_or_default(),
        "",
        cpu_summary(&result["cpu_ms_per_job"])
    )
}

/// Stops every worker pool, letting each finish what it runs. The embedded
/// shape's pool is in its api, which starts again without it.
async fn stop_pools(service: &mut Service) -> Result<()> {
    match service.shape {
        Shape::Production => {
            for worker in &mut service.workers {
                worker.terminate();
            }
            service.workers.clear();
        }
        Shape::Embedded => {
            restart_api(service, "false").await?;
        }
    }
    Ok(())
}

/// Starts the pools [`stop_pools`] stopped, as many as before.
async fn start_pools(service: &mut Service, args: &Args) -> Result<()> {
    match service.shape {
        Shape::Production => {
            service.workers = (0..args.workers)
                .map(|_| service.env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]))
                .collect();
        }
        Shape::Embedded => restart_api(service, "true").await?,
    }
    Ok(())
}

/// The api again, with its embedded pool or without, and the bench's
/// client of it.
async fn restart_api(service: &mut Service, embedded_worker: &str) -> Result<()> {
    if let Some(process) = service.api.process.as_mut() {
        process.terminate();
    }
    service.api = service
        .env
        .start_api(&[("EMBEDDED_WORKER", embedded_worker)])
        .await;
    service.client = bench_client(&service.api.base, KEY, reqwest::Client::new())?;
    Ok(())
}
