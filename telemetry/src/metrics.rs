//! The Prometheus recorder both binaries export: latencies as histograms
//! with one shared set of buckets, so that the buckets of N processes add
//! up (a summary's quantiles cannot be added), and gauges that stop being
//! exported when nothing sets them any more.

use std::{sync::OnceLock, time::Duration};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// Upper bounds (seconds) of every latency histogram's buckets: from a
/// request answered in under a millisecond to a report or a webhook retry
/// that takes minutes.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0,
];

/// How often recorded histogram values are folded into their buckets when
/// no scrape comes: between scrapes they are held one by one.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed at the first call; later calls get
/// the same handle. Gauges are set every `sample_every`
/// (`METRICS_SAMPLE_INTERVAL`); one not set for four of those (at least a
/// minute) leaves the output, so a series whose label value is no longer
/// sampled (a tenant that left the busiest few) does not stay for the life
/// of the process.
pub fn install(sample_every: Duration) -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let gauge_idle = (sample_every * 4).max(Duration::from_secs(60));
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets(LATENCY_BUCKETS)
                    .expect("the latency buckets are not empty")
                    .idle_timeout(MetricKindMask::GAUGE, Some(gauge_idle))
            };
            // Another library may have installed a recorder first: this
            // process then renders a private one, which nothing records
            // into, rather than fail to start.
            let handle = builder()
                .install_recorder()
                .unwrap_or_else(|_| builder().build_recorder().handle());
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                })
                .expect("spawn the metrics upkeep thread");
            handle
        })
        .clone()
}

/// Whether this process exports metrics: what samples only a scrape
/// would read can be skipped when it does not.
pub fn installed() -> bool {
    HANDLE.get().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_render_as_histograms_with_the_shared_buckets() {
        let handle = install(Duration::from_secs(15));
        metrics::histogram!("receipt_test_seconds").record(0.003);
        let text = handle.render();
        assert!(
            text.contains("# TYPE receipt_test_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(r#"receipt_test_seconds_bucket{le="0.005"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"receipt_test_seconds_bucket{le="0.0025"} 0"#),
            "{text}"
        );
        assert!(!text.contains("quantile"), "{text}");
    }
}
