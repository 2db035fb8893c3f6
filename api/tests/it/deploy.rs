//! What an operator installs from `deploy/`: the alert rules pass
//! `promtool`'s checks and their unit tests, the Grafana dashboard is JSON
//! whose every query is valid PromQL, and every metric either names is
//! one a running api or worker exports, so neither can drift from the
//! binaries; and each alert has its runbook in `docs/observability.md`.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use actix_web::HttpResponse;
use serde_json::{Value, json};

use crate::common::{Api, QueueShape, metrics_url, moment_sql, wait};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

/// Runs `promtool` with `args`; its output when it fails.
fn promtool(args: &[&str], dir: &Path) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool: {e} (Debian's prometheus package ships it; scripts/test installs it)")
        });
    assert!(
        output.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = deploy("prometheus");
    promtool(&["check", "rules", "alerts.yml"], &dir);
    promtool(&["test", "rules", "alerts.test.yml"], &dir);
}

/// Every PromQL query of the dashboard's panels.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/receipt.json")).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "receipt");
    let panels = dashboard["panels"].as_array().expect("panels");
    let queries: Vec<String> = panels
        .iter()
        .filter(|panel| panel["type"] != "row")
        .flat_map(|panel| {
            let targets = panel["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("a panel without targets: {panel}"));
            assert!(!targets.is_empty(), "{panel}");
            targets.iter().map(|target| {
                target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a target without expr: {target}"))
                    .to_owned()
            })
        })
        .collect();
    assert!(queries.len() >= 10, "{queries:?}");
    queries
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    // promtool checks PromQL in rule files: each query becomes a recording
    // rule, Grafana's interval variable a fixed range.
    let rules = json!({"groups": [{
        "name": "dashboard",
        "rules": dashboard_queries()
            .iter()
            .enumerate()
            .map(|(i, expr)| json!({
                "record": format!("dashboard:query_{i}"),
                "expr": expr.replace("$__rate_interval", "5m"),
            }))
            .collect::<Vec<_>>(),
    }]});
    let dir = tempfile::tempdir().expect("a temp dir");
    // JSON is YAML.
    std::fs::write(dir.path().join("dashboard.yml"), rules.to_string()).expect("write");
    promtool(&["check", "rules", "dashboard.yml"], dir.path());
}

/// The `receipt_*` metric names in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("receipt_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The series names of a `/metrics` page (a histogram's `_bucket`,
/// `_sum` and `_count` each).
fn exported(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

pub async fn page(url: &str) -> String {
    let reply = Api::read(reqwest::Client::new().get(url)).await;
    assert!(reply.status.is_success(), "{url}: {}", reply.text);
    reply.text
}

/// The value of the first series of `page` that starts with `series`.
pub fn value_of(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn accept() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported() {
    // Arrange: an api and a worker process; a webhook to a receiver that
    // accepts, and a schedule brought due.
    let running = QueueShape::Redis
        .start(&[
            ("METRICS_SAMPLE_INTERVAL", "100ms"),
            ("METRICS_TENANTS", "5"),
            ("WEBHOOK_ALLOW_PRIVATE", "true"),
        ])
        .await;
    let (api, worker) = (&running.api, running.worker.as_ref().expect("a worker"));
    let worker_metrics = metrics_url(worker);
    let (receiver, receiver_handle) =
        crate::common::serve_on_loopback(actix_web::web::Data::new(()), accept);
    let hook = api
        .post(
            "/v1/webhooks",
            &json!({"url": format!("http://{receiver}/hook")}),
        )
        .await;
    assert_eq!(hook.status, 201, "{}", hook.text);
    let schedule = api
        .post(
            "/v1/schedules",
            &json!({"kind": "sleep", "params": {"ms": 1}, "cron": "0 6 1 * *", "timezone": "UTC"}),
        )
        .await;
    assert_eq!(schedule.status, 201, "{}", schedule.text);
    let schedule_id = schedule.json()["schedule_id"]
        .as_str()
        .expect("schedule_id")
        .to_owned();

    // Act: a job runs and is announced; another waits an hour (its tenant
    // is then among the busiest); the schedule fires.
    let delayed = api
        .post("/v1/reports/sleep?delay=3600", &json!({"ms": 1}))
        .await;
    assert_eq!(delayed.status, 202, "{}", delayed.text);
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let done = api
        .wait_final(job["job_id"].as_str().expect("job_id"))
        .await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    running
        .env
        .execute_sql(&format!(
            "UPDATE schedules SET next_fire_at = {} WHERE schedule_id = '{schedule_id}'",
            moment_sql(
                running.env.backend,
                &(shared::time::now_ms() - 1_000).to_string()
            )
        ))
        .await;
    wait::until_true(
        "a delivery, a fire and a sample counted",
        Duration::from_secs(30),
        async || {
            let page = page(&worker_metrics).await;
            value_of(
                &page,
                r#"receipt_webhook_deliveries_total{outcome="delivered"}"#,
            )
            .is_some_and(|n| n >= 1.0)
                && value_of(&page, "receipt_schedule_lateness_seconds_count").is_some()
                && value_of(&page, r#"receipt_tenant_jobs_queued{tenant="tenant-a"}"#).is_some()
        },
    )
    .await;
    receiver_handle.stop(true).await;

    // Assert: what the deploy files name, the processes export.
    let mut names = exported(&page(&api.url("/metrics")).await);
    names.extend(exported(&page(&worker_metrics).await));
    let dashboard = names_in(&dashboard_queries().join("\n"));
    let alerts = names_in(
        &std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("the alert rules"),
    );
    assert!(dashboard.len() >= 15, "{dashboard:?}");
    assert!(alerts.len() >= 6, "{alerts:?}");
    let missing: Vec<&String> = dashboard
        .iter()
        .chain(&alerts)
        .filter(|name| !names.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "named in deploy/ but exported by neither process: {missing:?}\nexported: {names:?}"
    );
}

#[test]
fn every_alert_has_a_runbook_in_the_docs() {
    let rules = std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("the alert rules");
    let docs = std::fs::read_to_string(deploy("../docs/observability.md")).expect("the docs");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 6, "{alerts:?}");
    for alert in alerts {
        assert!(
            docs.contains(&format!("\n### {alert}\n")),
            "no runbook heading for {alert} in docs/observability.md"
        );
        let link = format!(
            "runbook: docs/observability.md#{}",
            alert.to_ascii_lowercase()
        );
        assert!(rules.contains(&link), "{alert} does not link its runbook");
    }
}
