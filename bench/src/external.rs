//! Scenario: external. The same no-op jobs run by a built-in kind and by
//! a registered kind whose worker is Receipt's Python SDK
//! (`bench/peers/python-worker/noop.py`, an asyncio worker of
//! `--concurrency` slots, in a process of its own) in one run: closed-loop
//! e2e of both, the pickup of an idle system through the worker's waiting
//! lease, and the CPU per job of each process, the SDK's included.

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, Result, bail};
use receipt_client::{Client, KindDeclaration, Submit};
use serde_json::{Value, json};
use testkit::{Process, Stderr, tools};

use crate::{
    Service, Target, cpu_summary, end_to_end_of, pickup_latencies, sleep, stats::percentile,
};

const REQUIREMENTS: &str = include_str!("../../sdk/python/requirements-test.txt");

/// A venv with the SDK installed from the tree, made once per set of pins.
fn python() -> PathBuf {
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/python");
    let venv = tools::installed("python-sdk-bench-venv", REQUIREMENTS, |dir| {
        tools::run(
            "making a virtualenv for the Python SDK (python3 with venv, 3.10 or newer)",
            Command::new("python3").arg("-m").arg("venv").arg(dir),
        );
    });
    tools::run(
        "installing the Python SDK from sdk/python",
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--force-reinstall",
            sdk,
        ]),
    );
    venv.join("bin/python")
}

fn noop() -> Submit {
    Submit::json("noop", json!({}))
}

/// A key of the bench tenant with the work scope.
fn work_key(service: &Service) -> Result<String> {
    let run = service.env.run_api(
        &["keys", "create", "--tenant", "bench", "--scope", "work"],
        &[],
    );
    if !run.status.success() {
        bail!("api keys create: {}\n{}", run.stdout, run.stderr);
    }
    run.stdout
        .lines()
        .find_map(|line| line.strip_prefix("API key: "))
        .map(str::to_owned)
        .context("no key printed")
}

pub(crate) async fn external(service: &Service, args: &crate::Args) -> Result<Value> {
    let clients = args.clients.unwrap_or(args.concurrency);
    let built_in = end_to_end_of(&service.target(), args.jobs, clients, &sleep(0)).await?;

    let declaration: KindDeclaration = serde_json::from_value(json!({
        "params_schema": {"type": "object"}, "timeout_secs": 60,
    }))?;
    service.client.put_kind("noop", &declaration).await?;
    let key = work_key(service)?;
    let python = python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/python-worker/noop.py");
    let concurrency = args.concurrency.to_string();
    let worker = Process::spawn_with_args(
        &python,
        &[script],
        &[
            ("RECEIPT_URL".into(), service.api.base.clone()),
            ("RECEIPT_WORKER_KEY".into(), key),
            ("CONCURRENCY".into(), concurrency),
        ],
        Stderr::Echo,
    );
    wait_connected(&service.client).await?;

    let pickups = pickup_latencies(&service.client, &noop(), args.pickup_jobs).await?;
    let mut target: Target<'_> = service.target();
    target.watched.processes.push(("sdk", worker.pid()));
    let before = worker_calls(service).await;
    let through_sdk = end_to_end_of(&target, args.jobs, clients, &noop()).await?;
    let after = worker_calls(service).await;
    drop(worker);
    let per_job = |at: usize| (after[at].0 - before[at].0) as f64 / args.jobs as f64;
    // The mean time the api took to answer a call, in ms.
    let mean_ms = |at: usize| {
        1000.0 * (after[at].1 - before[at].1) / (after[at].0 - before[at].0).max(1) as f64
    };
    Ok(json!({
        "jobs": args.jobs,
        "slots": args.concurrency,
        "built_in_jobs_per_s": built_in.jobs_per_s,
        "built_in_cpu_ms_per_job": built_in.cpu_ms_per_job,
        "sdk_jobs_per_s": through_sdk.jobs_per_s,
        "sdk_cpu_ms_per_job": through_sdk.cpu_ms_per_job,
        "share": through_sdk.jobs_per_s / built_in.jobs_per_s,
        "lease_calls_per_job": per_job(0),
        "report_calls_per_job": per_job(1),
        "lease_call_mean_ms": mean_ms(0),
        "report_call_mean_ms": mean_ms(1),
        "pickup_jobs": pickups.len(),
        "pickup_p50_ms": percentile(&pickups, 0.5),
        "pickup_p99_ms": percentile(&pickups, 0.99),
    }))
}

/// The worker routes' calls the api has answered so far, each with the
/// seconds it spent on them: leases, then reports (the batches and the
/// single-attempt calls together).
async fn worker_calls(service: &Service) -> [(u64, f64); 2] {
    let api = &service.api;
    let reports = [
        "/v1/work/reports",
        "/v1/work/attempts/{token}/complete",
        "/v1/work/attempts/{token}/fail",
        "/v1/work/attempts/{token}/cancelled",
    ];
    let lease = ["/v1/work/lease"];
    [
        (api.calls_to(&lease).await, api.seconds_in(&lease).await),
        (api.calls_to(&reports).await, api.seconds_in(&reports).await),
    ]
}

/// Waits until the SDK's worker has leased once (it waits in its long poll).
async fn wait_connected(client: &Client) -> Result<()> {
    for _ in 0..300 {
        if client
            .workers()
            .await?
            .iter()
            .any(|worker| worker.connected)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the Python SDK's worker did not lease within 30 s")
}

/// The scenario's lines of the table.
pub(crate) fn summary(result: &Value) -> String {
    format!(
        "{:>8.0} jobs/s through the Python SDK = {:.0}% of the built-in kind's {:.0}; pickup p50 {:.1} p99 {:.1} ms\n{:>25}calls per job: {:.2} leases ({:.1} ms each), {:.2} reports ({:.1} ms each)\n{:>25}CPU ms per job, SDK: {}\n{:>25}CPU ms per job, built in: {}",
        result["sdk_jobs_per_s"].as_f64().unwrap_or_default(),
        100.0 * result["share"].as_f64().unwrap_or_default(),
        result["built_in_jobs_per_s"].as_f64().unwrap_or_default(),
        result["pickup_p50_ms"].as_f64().unwrap_or_default(),
        result["pickup_p99_ms"].as_f64().unwrap_or_default(),
        "",
        result["lease_calls_per_job"].as_f64().unwrap_or_default(),
        result["lease_call_mean_ms"].as_f64().unwrap_or_default(),
        result["report_calls_per_job"].as_f64().unwrap_or_default(),
        result["report_call_mean_ms"].as_f64().unwrap_or_default(),
        "",
        cpu_summary(&result["sdk_cpu_ms_per_job"]),
        "",
        cpu_summary(&result["built_in_cpu_ms_per_job"]),
    )
}
