//! The Rust worker (`receipt_client::Worker`) against the real service: it
//! runs a registered kind's attempts to their reports (a JSON result, a
//! streamed one, a retryable failure then a success, a failure for good),
//! stops a handler whose job is cancelled, and stops leasing when told.

use std::time::Duration;

use receipt_client::{Client, JobStatus, KindDeclaration, Output, WorkError, Worker};
use serde_json::json;
use testkit::{Api, Backend, KEY_A, TestEnv};
use tokio::sync::oneshot;

/// A key of tenant-a with the work scope, made by `api keys create`.
fn work_key(env: &TestEnv) -> String {
    let run = env.run_api(
        &["keys", "create", "--tenant", "tenant-a", "--scope", "work"],
        &[],
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    run.stdout
        .lines()
        .find_map(|line| line.strip_prefix("API key: "))
        .expect("the key")
        .to_owned()
}

fn declaration(media_types: &[&str]) -> KindDeclaration {
    serde_json::from_value(json!({
        "params_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
        "timeout_secs": 60,
        "max_attempts": 3,
        "result_media_types": media_types,
    }))
    .expect("a declaration")
}

/// The service, a client of full rights, and a worker's client once the
/// service knows its key.
async fn service() -> (TestEnv, Api, Client, Client) {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let client = Client::new(&api.base, KEY_A).expect("a client");
    client
        .put_kind("numbers", &declaration(&["application/json"]))
        .await
        .expect("a kind");
    client
        .put_kind("csv", &declaration(&["text/csv"]))
        .await
        .expect("a kind");
    let key = work_key(&env);
    let work = Client::new(&api.base, &key).expect("a worker's client");
    testkit::wait::until_true(
        "the service knows the work key",
        Duration::from_secs(10),
        async || {
            work.workers()
                .await
                .is_err_and(|e| e.to_string().starts_with("403"))
        },
    )
    .await;
    (env, api, client, work)
}

/// The calls the api answered on `route` (its pattern), from its metrics.
async fn calls_to(api: &Api, route: &str) -> u64 {
    let metrics = api
        .client
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("the metrics")
        .text()
        .await
        .expect("their text");
    let label = format!("route=\"{route}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with("receipt_http_requests_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_attempts_to_their_reports() {
    let (_env, api, client, work) = service().await;
    let worker = Worker::new(work, "rust-1")
        .concurrency(2)
        .kind("numbers", |attempt| async move {
            let n = attempt.params["n"].as_i64().unwrap_or(0);
            attempt.progress(0.5);
            match n {
                // Fails its first attempt, retryably.
                1 if attempt.attempt == 1 => Err(WorkError::retryable("flaky", "the first try")),
                2 => Err(WorkError::permanent("bad_input", "never works")),
                _ => Ok(Output::from(json!({"n": n, "attempt": attempt.attempt}))),
            }
        })
        .kind("csv", |_attempt| async move {
            Ok::<_, WorkError>(Output::Bytes {
                media_type: "text/csv".into(),
                body: b"a,b\n1,2\n".to_vec(),
            })
        });
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(stopped));

    let submit = |kind: &'static str, n: i64| {
        let client = client.clone();
        async move {
            client
                .submit(receipt_client::Submit::json(kind, json!({"n": n})))
                .await
                .expect("a submit")
                .job_id
        }
    };
    let plain = submit("numbers", 0).await;
    let flaky = submit("numbers", 1).await;
    let broken = submit("numbers", 2).await;
    let csv = submit("csv", 0).await;

    let wait = |job_id: String| {
        let client = client.clone();
        async move {
            client
                .wait(&job_id, Duration::from_secs(60))
                .await
                .expect("the job")
        }
    };
    let done = wait(plain.clone()).await;
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(
        client.result(&plain).await.unwrap(),
        json!({"n": 0, "attempt": 1})
    );
    let retried = wait(flaky.clone()).await;
    assert_eq!(
        (retried.status, retried.attempts),
        (JobStatus::Succeeded, 2)
    );
    let failed = wait(broken).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.error.expect("an error").error_type, "bad_input");
    assert_eq!(wait(csv.clone()).await.status, JobStatus::Succeeded);
    let mut body = Vec::new();
    client
        .stream_result(&csv, receipt_client::ResultFormat::Json, &mut body)
        .await
        .expect("the result");
    assert_eq!(body, b"a,b\n1,2\n");

    let workers = client.workers().await.expect("the workers");
    assert_eq!(workers[0].name, "rust-1");
    assert_eq!(workers[0].failed, 2, "{workers:?}");
    // The JSON results and the failures went in batches of reports; the
    // CSV result, through its own complete.
    let calls = |route: &'static str| calls_to(&api, route);
    assert!(calls("/v1/work/reports").await >= 1);
    assert_eq!(calls("/v1/work/attempts/{token}/complete").await, 1);
    assert_eq!(calls("/v1/work/attempts/{token}/fail").await, 0);

    stop.send(()).expect("the worker runs");
    tokio::time::timeout(Duration::from_secs(40), running)
        .await
        .expect("the worker stopped")
        .expect("joined")
        .expect("ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_the_handler_and_the_job_ends_cancelled() {
    let (_env, _api, client, work) = service().await;
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let worker = Worker::new(work, "rust-2")
        .heartbeat_every(Duration::from_millis(200))
        .kind("numbers", move |attempt| {
            let started = started.clone();
            async move {
                let _ = started.send(attempt.job_id.clone());
                std::future::pending::<()>().await;
                Ok::<Output, WorkError>(json!({}).into())
            }
        });
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(stopped));

    let job = client
        .submit(receipt_client::Submit::json("numbers", json!({"n": 0})))
        .await
        .expect("a submit");
    let held = tokio::time::timeout(Duration::from_secs(30), started_rx.recv())
        .await
        .expect("the handler started")
        .expect("a job id");
    assert_eq!(held, job.job_id);
    client.cancel(&job.job_id).await.expect("the cancel");
    let ended = client
        .wait(&job.job_id, Duration::from_secs(30))
        .await
        .expect("the job");
    assert_eq!(ended.status, JobStatus::Cancelled);

    stop.send(()).expect("the worker runs");
    tokio::time::timeout(Duration::from_secs(40), running)
        .await
        .expect("the worker stopped")
        .expect("joined")
        .expect("ran");
}
