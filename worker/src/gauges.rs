//! The queue sampler: sets the gauges an operator alerts on (jobs queued
//! and running, the age of the oldest due job per kind, the outbox's
//! backlog) from one cheap read of the database per interval
//! (`METRICS_SAMPLE_INTERVAL`). Only a pool whose process exports metrics
//! samples: a `worker` without `METRICS_ADDR` costs the database nothing.
//! Every pool that does samples the same database, so the processes
//! report the same values: a query takes their `max`, never their `sum`.

use std::{collections::BTreeMap, time::Duration};

use reports::Registry;
use store::{QueueSample, Store};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// The `kind` label of a kind no longer in the registry (its jobs are
/// still stored): label values come from the registry only.
const OTHER_KIND: &str = "other";

pub async fn run_queue_sampler(
    store: Store,
    registry: Registry,
    tenants: u16,
    every: Duration,
    stop: CancellationToken,
) {
    let kinds: Vec<&'static str> = registry.names().collect();
    if telemetry::metrics::installed() {
        declare_counters(&registry);
    }
    loop {
        if telemetry::metrics::installed() {
            match store.sample_queue(&kinds, i64::from(tenants)).await {
                Ok(sample) => export(&kinds, &sample),
                Err(error) => warn!(%error, "sampling the queue for its gauges failed"),
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Starts the counters of rare events at 0 for every label set they can
/// take, so that the first event is an increase a rule sees, and a
/// dashboard shows 0 rather than no data before it.
fn declare_counters(registry: &Registry) {
    for outcome in crate::dispatcher::DELIVERY_OUTCOMES {
        metrics::counter!("receipt_webhook_deliveries_total", "outcome" => outcome).increment(0);
    }
    for kind in registry.kinds() {
        for step in kind.step_names() {
            for outcome in ["done", "failed"] {
                metrics::counter!("receipt_saga_compensations_total", "kind" => kind.name(), "step" => step, "outcome" => outcome)
                    .increment(0);
            }
        }
    }
}

#[derive(Default)]
struct KindGauges {
    queued: i64,
    running: i64,
    oldest_seconds: f64,
}

fn export(kinds: &[&'static str], sample: &QueueSample) {
    let mut by_label: BTreeMap<&'static str, KindGauges> = kinds
        .iter()
        .map(|kind| (*kind, KindGauges::default()))
        .collect();
    for kind in &sample.by_kind {
        let label = kinds
            .iter()
            .find(|known| **known == kind.kind)
            .copied()
            .unwrap_or(OTHER_KIND);
        let gauges = by_label.entry(label).or_default();
        gauges.queued += kind.queued;
        gauges.running += kind.running;
        gauges.oldest_seconds = gauges.oldest_seconds.max(kind.oldest_queued_seconds);
    }
    for (kind, gauges) in by_label {
        metrics::gauge!("receipt_jobs_queued", "kind" => kind).set(gauges.queued as f64);
        metrics::gauge!("receipt_jobs_running", "kind" => kind).set(gauges.running as f64);
        metrics::gauge!("receipt_queue_oldest_seconds", "kind" => kind).set(gauges.oldest_seconds);
    }
    // Tenant ids are the operator's (API keys name them), and at most
    // METRICS_TENANTS of them are labelled per sample; one that leaves the
    // busiest few leaves the output once its gauges go idle.
    for tenant in &sample.busiest_tenants {
        metrics::gauge!("receipt_tenant_jobs_queued", "tenant" => tenant.tenant_id.clone())
            .set(tenant.queued as f64);
        metrics::gauge!("receipt_tenant_jobs_running", "tenant" => tenant.tenant_id.clone())
            .set(tenant.running as f64);
    }
    metrics::gauge!("receipt_outbox_backlog").set(sample.outbox_backlog as f64);
    metrics::gauge!("receipt_outbox_oldest_seconds").set(sample.outbox_oldest_seconds);
}
