//! What operators read: `/metrics` stays bounded whatever clients send,
//! its gauges follow the queue and its latencies are histograms; and the
//! log is plain text without colour codes when it is not a terminal, or
//! JSON lines with `LOG_FORMAT=json`.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    common::{Api, Backend, QueueShape, Running, TestEnv, bin_path, metrics_url, wait},
    deploy::{page, value_of},
    on_every_queue_shape,
};

/// The `receipt_http_requests_total` series of a scrape, one line each.
async fn request_series(api: &Api) -> Vec<String> {
    let reply = Api::read(api.client.get(api.url("/metrics"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply
        .text
        .lines()
        .filter(|line| line.starts_with("receipt_http_requests_total{"))
        .map(|line| line.rsplit_once(' ').map_or(line, |(series, _)| series))
        .map(str::to_owned)
        .collect()
}

/// The value of one series in a scrape.
async fn series_value(api: &Api, series: &str) -> f64 {
    let reply = Api::read(api.client.get(api.url("/metrics"))).await;
    reply
        .text
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Sends `requests` (method, path) on one keep-alive connection, pipelined
/// a batch at a time, and returns the status of each answer in order. Raw
/// HTTP/1.1, so that the client costs next to nothing beside the server.
async fn pipelined(addr: &str, requests: &[(String, String)]) -> Vec<u16> {
    const BATCH: usize = 200;
    let mut stream = TcpStream::connect(addr).await.expect("connect to the api");
    let mut statuses = Vec::with_capacity(requests.len());
    let mut buffer: Vec<u8> = Vec::new();
    for batch in requests.chunks(BATCH) {
        let mut out = String::new();
        for (method, path) in batch {
            out.push_str(&format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n"));
        }
        stream
            .write_all(out.as_bytes())
            .await
            .expect("send a batch");
        let mut answered = 0;
        while answered < batch.len() {
            if let Some((status, length)) = next_response(&buffer) {
                statuses.push(status);
                buffer.drain(..length);
                answered += 1;
                continue;
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = stream.read(&mut chunk).await.expect("read answers");
            assert!(
                n > 0,
                "the api closed the connection after {answered} answers"
            );
            buffer.extend_from_slice(&chunk[..n]);
        }
    }
    statuses
}

/// The status and whole length of the first complete response in `buffer`.
fn next_response(buffer: &[u8]) -> Option<(u16, usize)> {
    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buffer[..head_end]).expect("an ASCII head");
    let status = head.split(' ').nth(1)?.parse().expect("a status");
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().expect("a content length"))
        })
        .unwrap_or_else(|| panic!("an answer without Content-Length: {head}"));
    (buffer.len() >= head_end + length).then_some((status, head_end + length))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_and_paths_add_no_metric_series() {
    // Arrange: a baseline scrape, taken twice so that the scrape itself
    // has its series already; 50,000 requests, each with a method of its
    // own, half on a known path (405) and half on a made-up one (404).
    const REQUESTS: usize = 50_000;
    const CONNECTIONS: usize = 8;
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    request_series(&api).await;
    let before = request_series(&api).await;
    let addr = api.base.trim_start_matches("http://").to_owned();
    let requests: Vec<(String, String)> = (0..REQUESTS)
        .map(|i| {
            let path = if i % 2 == 0 {
                "/v1/jobs".to_owned()
            } else {
                format!("/made-up/{i}")
            };
            (format!("FOO{i}"), path)
        })
        .collect();

    // Act: over a few keep-alive connections at once.
    let started = Instant::now();
    let senders: Vec<_> = requests
        .chunks(REQUESTS / CONNECTIONS)
        .map(|share| {
            let (addr, share) = (addr.clone(), share.to_vec());
            tokio::spawn(async move { (pipelined(&addr, &share).await, share) })
        })
        .collect();
    let mut answered = [0usize; 2];
    for sender in senders {
        let (statuses, share) = sender.await.expect("a sender");
        for (status, (method, path)) in statuses.iter().zip(&share) {
            match status {
                405 => answered[0] += 1,
                404 => answered[1] += 1,
                other => panic!("{method} {path} answered {other}"),
            }
        }
    }
    println!("{REQUESTS} requests in {:?}", started.elapsed());
    assert_eq!(answered, [REQUESTS / 2, REQUESTS / 2]);

    // Assert: the only new series are of method `other`, one per route
    // and status, and they counted every request.
    let after = request_series(&api).await;
    let new: Vec<&String> = after.iter().filter(|s| !before.contains(s)).collect();
    assert!(
        new.iter().all(|s| s.contains(r#"method="other""#)),
        "new series of another method: {new:?}"
    );
    assert!(
        after.len() <= before.len() + 2,
        "{} series before, {} after: {new:?}",
        before.len(),
        after.len()
    );
    let known = r#"receipt_http_requests_total{method="other",route="/v1/jobs",status="405"}"#;
    let unknown = r#"receipt_http_requests_total{method="other",route="unmatched",status="404"}"#;
    assert_eq!(series_value(&api, known).await, (REQUESTS / 2) as f64);
    assert_eq!(series_value(&api, unknown).await, (REQUESTS / 2) as f64);
    let scrape = Api::read(api.client.get(api.url("/metrics"))).await.text;
    assert!(!scrape.contains("FOO"), "a made-up method became a label");
    assert!(
        !scrape.contains("/made-up/"),
        "a made-up path became a label"
    );
}

/// Runs a binary of the workspace with a setting that stops it at once
/// (an unsupported database), its output going to pipes, and returns what
/// it logged: stderr for the api, stdout for a worker.
fn log_of_a_failed_start(binary: &str, log_format: Option<&str>) -> String {
    let mut command = Command::new(bin_path(binary));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("DATABASE_URL", "mysql://127.0.0.1/nothing")
        .stdin(Stdio::null());
    if let Some(format) = log_format {
        command.env("LOG_FORMAT", format);
    }
    let output = command.output().expect("run the binary");
    assert!(!output.status.success(), "{binary} started on mysql://");
    let log = if binary == "api" {
        output.stderr
    } else {
        output.stdout
    };
    String::from_utf8(log).expect("a UTF-8 log")
}

#[test]
fn logs_are_json_lines_with_log_format_json_and_never_coloured_into_a_pipe() {
    for (binary, stopped) in [("api", "api stopped"), ("worker", "worker stopped")] {
        // Act: the same failed start, logged both ways.
        let text = log_of_a_failed_start(binary, None);
        let json = log_of_a_failed_start(binary, Some("json"));

        // Assert: text is readable and without ANSI codes ...
        assert!(text.contains(stopped), "{binary}: {text}");
        assert!(
            !text.contains('\u{1b}'),
            "{binary} coloured a pipe: {text:?}"
        );
        // ... and every JSON line is an object with level and message.
        assert!(!json.contains('\u{1b}'), "{binary}: {json:?}");
        let lines: Vec<Value> = json
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{binary}: not a JSON line ({e}): {line}"))
            })
            .collect();
        let last = lines
            .last()
            .unwrap_or_else(|| panic!("{binary} logged nothing"));
        assert_eq!(last["level"], "ERROR", "{binary}: {last}");
        assert_eq!(last["message"], stopped, "{binary}: {last}");
        assert!(
            last["error"]
                .as_str()
                .is_some_and(|e| e.contains("DATABASE_URL")),
            "{binary}: {last}"
        );
        assert!(last["timestamp"].is_string(), "{binary}: {last}");
    }
}

/// The `/metrics` page of the process that runs the worker pool.
fn pool_metrics_url(running: &Running) -> String {
    match &running.worker {
        Some(worker) => metrics_url(worker),
        None => running.api.url("/metrics"),
    }
}

/// Waits until the pool's page shows `series` (exactly, labels and all)
/// with a value that `wanted` accepts; returns the page.
async fn wait_for_series(url: &str, series: &str, wanted: impl Fn(f64) -> bool) -> String {
    wait::until_true(
        &format!("{series} as wanted"),
        Duration::from_secs(30),
        async || value_of(&page(url).await, &format!("{series} ")).is_some_and(&wanted),
    )
    .await;
    page(url).await
}

async fn the_queue_gauges_follow_the_jobs_and_latencies_are_histograms(shape: QueueShape) {
    // Arrange: one `sleep` job at a time, sampled every 100 ms.
    let running = shape
        .start(&[
            ("MAX_RUNNING_PER_KIND", "sleep=1"),
            ("METRICS_SAMPLE_INTERVAL", "100ms"),
        ])
        .await;
    let api = &running.api;
    let url = pool_metrics_url(&running);

    // Act: a long job runs, and a second waits behind the cap.
    let long = api.submit("sleep", json!({"ms": 3000})).await;
    let long_id = long["job_id"].as_str().expect("job_id");
    api.wait_status(long_id, "RUNNING").await;
    let short = api.submit("sleep", json!({"ms": 1})).await;

    // Assert: one running, one queued, and the queued one ages.
    wait_for_series(&url, r#"receipt_jobs_running{kind="sleep"}"#, |n| n == 1.0).await;
    wait_for_series(&url, r#"receipt_jobs_queued{kind="sleep"}"#, |n| n == 1.0).await;
    wait_for_series(&url, r#"receipt_queue_oldest_seconds{kind="sleep"}"#, |s| {
        (0.5..30.0).contains(&s)
    })
    .await;

    // Act: both end.
    for job in [long_id, short["job_id"].as_str().expect("job_id")] {
        assert_eq!(api.wait_final(job).await["status"], "SUCCEEDED");
    }

    // Assert: the gauges go back to 0 ...
    wait_for_series(&url, r#"receipt_jobs_running{kind="sleep"}"#, |n| n == 0.0).await;
    wait_for_series(&url, r#"receipt_jobs_queued{kind="sleep"}"#, |n| n == 0.0).await;
    wait_for_series(&url, r#"receipt_queue_oldest_seconds{kind="sleep"}"#, |s| {
        s == 0.0
    })
    .await;
    let pool = wait_for_series(&url, "receipt_outbox_backlog", |n| n == 0.0).await;
    // ... and the attempts' durations fall in their buckets: the long one
    // above 2.5 s, the short one below.
    assert!(
        pool.contains("# TYPE receipt_job_attempt_seconds histogram"),
        "{pool}"
    );
    assert!(!pool.contains("quantile="), "a summary is left:\n{pool}");
    let bucket = |le: &str| {
        value_of(
            &pool,
            &format!(r#"receipt_job_attempt_seconds_bucket{{kind="sleep",le="{le}"}} "#),
        )
    };
    assert_eq!(bucket("0.5"), Some(1.0), "{pool}");
    assert_eq!(bucket("2.5"), Some(1.0), "{pool}");
    assert_eq!(bucket("5"), Some(2.0), "{pool}");
    assert_eq!(bucket("+Inf"), Some(2.0), "{pool}");
    // The api's request latencies are a histogram too.
    let api_page = page(&api.url("/metrics")).await;
    let submits = value_of(
        &api_page,
        r#"receipt_http_request_seconds_bucket{method="POST",route="/v1/reports/{kind}",le="+Inf"} "#,
    );
    assert_eq!(submits, Some(2.0), "{api_page}");
    assert_eq!(
        value_of(&api_page, r#"receipt_ready{dependency="database"} "#),
        Some(1.0),
        "{api_page}"
    );
}

on_every_queue_shape!(the_queue_gauges_follow_the_jobs_and_latencies_are_histograms);
