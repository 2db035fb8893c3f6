//! Priorities and concurrency caps (`docs/api.md`, Priorities and
//! Concurrency caps) through the processes. The order of claims where the
//! job rows are the queue, the relay's order and aging are the worker's
//! suite's (`worker/tests/suite/priorities.rs`); here, a high job ahead of
//! a low backlog in Redis's sorted sets, the strict `priority` option, and
//! a cap under contention between worker processes, on every queue shape.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::time::parse_rfc3339;

use crate::common::{Api, QueueShape, StoreOf};

crate::on_every_queue_shape!(a_tenant_cap_holds_under_contention_and_holds_back_no_other_tenant);

/// Redis orders a tenant's messages itself (a sorted set scored by rank);
/// the other shapes claim from the job rows in the order the worker's
/// suite checks.
mod redis_sorted_set {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_high_job_runs_before_the_low_backlog_of_its_tenant() {
        super::a_high_job_runs_before_the_low_backlog_of_its_tenant(
            crate::common::QueueShape::Redis,
        )
        .await;
    }
}

fn ms_of(time: &Value) -> i64 {
    parse_rfc3339(time.as_str().expect("a time")).expect("RFC 3339")
}

fn id_of(job: &Value) -> String {
    job["job_id"].as_str().expect("job_id").to_owned()
}

async fn submit_with(api: &Api, query: &str, ms: u64) -> Value {
    let reply = api
        .post(&format!("/v1/reports/sleep?{query}"), &json!({ "ms": ms }))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    reply.json()
}

async fn started_at(api: &Api, job_id: &str) -> i64 {
    let done = api.wait_final(job_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    ms_of(&done["started_at"])
}

async fn a_high_job_runs_before_the_low_backlog_of_its_tenant(shape: QueueShape) {
    let running = shape.start(&[("WORKER_CONCURRENCY", "1")]).await;
    let api = &running.api;
    // Held until every job below is queued, however slow the submits.
    let blocker = api.submit("sleep", json!({ "ms": 60_000 })).await;
    let blocker = id_of(&blocker);
    api.wait_status(&blocker, "RUNNING").await;
    let mut lows = Vec::new();
    for _ in 0..20 {
        let low = submit_with(api, "priority=low", 1).await;
        assert_eq!(low["priority"], "low");
        lows.push(id_of(&low));
    }
    let high = submit_with(api, "priority=high", 1).await;
    assert_eq!(high["priority"], "high");
    let cancel = api
        .post(&format!("/v1/jobs/{blocker}/cancel"), &json!({}))
        .await;
    assert!(cancel.status.is_success(), "{}", cancel.text);
    let high_started = started_at(api, &id_of(&high)).await;
    let mut ahead = 0;
    for low in &lows {
        if started_at(api, low).await < high_started {
            ahead += 1;
        }
    }
    // A pool may have fetched one message ahead while its slot was busy,
    // before the high job existed.
    assert!(
        ahead <= 1,
        "{ahead} of the 20 low jobs submitted before it ran before the high job"
    );

    // Strict: a priority is one of three names, and a submit takes no
    // other option.
    for query in ["priority=urgent", "priority=", "priorty=high"] {
        let reply = api
            .post(&format!("/v1/reports/sleep?{query}"), &json!({"ms": 1}))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            reply.text
        );
    }
}

async fn a_tenant_cap_holds_under_contention_and_holds_back_no_other_tenant(shape: QueueShape) {
    let settings = [("WORKER_CONCURRENCY", "8"), ("MAX_RUNNING_PER_TENANT", "2")];
    let running = shape.start(&settings).await;
    // Both tenants are capped at 2: their 80 jobs wait parked while the
    // 16 slots (two pools of eight, but for the embedded shape's one pool;
    // the bench runs four) claim past them.
    let extra: Vec<_> = if shape == QueueShape::Embedded {
        Vec::new()
    } else {
        (0..1)
            .map(|_| {
                let worker = running.env.start_worker(&[("METRICS_ADDR", "127.0.0.1:0")]);
                worker.wait_for_line("metrics on http://");
                worker
            })
            .collect()
    };
    let (api_a, api_b) = (&running.api, &running.api.as_tenant_b());
    let mut jobs_a = Vec::new();
    let mut jobs_b = Vec::new();
    for _ in 0..40 {
        jobs_a.push(id_of(&submit_with(api_a, "", 300).await));
        jobs_b.push(id_of(&submit_with(api_b, "", 300).await));
    }

    let store = running.env.store().await;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            let (mut most_a, mut most_b, mut both_full, mut samples) = (0, 0, 0, 0);
            while !done.load(Ordering::Relaxed) {
                let (a, _) = store
                    .running_counts("tenant-a", "sleep")
                    .await
                    .expect("count");
                let (b, _) = store
                    .running_counts("tenant-b", "sleep")
                    .await
                    .expect("count");
                (most_a, most_b, samples) = (most_a.max(a), most_b.max(b), samples + 1);
                both_full += usize::from(a == 2 && b == 2);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            (most_a, most_b, both_full, samples)
        })
    };
    // A parked job says why it waits, and how many jobs hold it there.
    let mut seen_parked = None;
    while seen_parked.is_none() {
        let list = api_a.get("/v1/jobs?status=QUEUED&limit=100").await.json();
        let Some(parked) = list["data"]
            .as_array()
            .expect("data")
            .iter()
            .find(|job| job["waiting"]["reason"] == "tenant_concurrency_limit")
        else {
            assert!(
                api_a.job(jobs_a.last().expect("a job")).await["status"] == "QUEUED",
                "tenant-a's last job left the queue and no job was ever seen parked"
            );
            continue;
        };
        let job = api_a.job(&id_of(parked)).await;
        if job["waiting"]["reason"] == "tenant_concurrency_limit" {
            seen_parked = Some(job);
        }
    }
    let parked = seen_parked.expect("a parked job");
    assert_eq!(parked["waiting"]["limit"], 2, "{parked}");
    let held_by = parked["waiting"]["running"].as_i64().expect("running");
    assert!((0..=2).contains(&held_by), "{parked}");

    for (api, job) in jobs_a
        .iter()
        .map(|job| (api_a, job))
        .chain(jobs_b.iter().map(|job| (api_b, job)))
    {
        let done = api.wait_final(job).await;
        assert_eq!(done["status"], "SUCCEEDED", "{done}");
    }
    done.store(true, Ordering::Relaxed);
    let (most_a, most_b, both_full, samples) = sampler.await.expect("sampler");
    assert!(
        most_a <= 2 && most_b <= 2,
        "{most_a} of tenant-a's and {most_b} of tenant-b's jobs ran at once (cap 2, {samples} samples)"
    );
    assert!(
        both_full > 0,
        "both tenants never ran their cap at once ({samples} samples): one tenant's parked \
         backlog held the other back"
    );
    drop(extra);
}
