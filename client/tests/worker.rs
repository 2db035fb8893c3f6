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
    let (env, api, client, key) = service_with_key().await;
    let work = Client::new(&api.base, &key).expect("a worker's client");
    (env, api, client, work)
}

/// [`service`], with the work key itself rather than its client.
async fn service_with_key() -> (TestEnv, Api, Client, String) {
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
    (env, api, client, key)
}

type Running = tokio::task::JoinHandle<receipt_client::Result<()>>;

/// Runs `worker` until told to stop through the sender.
fn start_worker(worker: Worker) -> (oneshot::Sender<()>, Running) {
    let (stop, stopped) = oneshot::channel::<()>();
    (stop, tokio::spawn(worker.run(stopped)))
}

/// Tells a running worker to stop, and waits for its run to end well.
async fn stop_worker(stop: oneshot::Sender<()>, running: Running) {
    stop.send(()).expect("the worker runs");
    tokio::time::timeout(Duration::from_secs(40), running)
        .await
        .expect("the worker stopped")
        .expect("joined")
        .expect("ran");
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
    let (stop, running) = start_worker(worker);

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
    assert!(api.calls_to(&["/v1/work/reports"]).await >= 1);
    let complete = api.calls_to(&["/v1/work/attempts/{token}/complete"]).await;
    assert_eq!(complete, 1);
    assert_eq!(api.calls_to(&["/v1/work/attempts/{token}/fail"]).await, 0);

    stop_worker(stop, running).await;
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
    let (stop, running) = start_worker(worker);

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

    stop_worker(stop, running).await;
}

/// A proxy between a worker and the api that answers every batch of
/// reports 503 (`Retry-After: 0`) while `refusing`, and forwards the rest.
#[derive(Default)]
struct ReportsGate {
    upstream: String,
    refusing: std::sync::atomic::AtomicBool,
    /// Batches refused since `ran_second`.
    refused_after: std::sync::atomic::AtomicUsize,
    ran_second: std::sync::atomic::AtomicBool,
    leases: std::sync::atomic::AtomicUsize,
}

async fn through_gate(
    gate: actix_web::web::Data<ReportsGate>,
    request: actix_web::HttpRequest,
    body: actix_web::web::Bytes,
) -> actix_web::HttpResponse {
    use std::sync::atomic::Ordering::SeqCst;
    let path = request.uri().path();
    if path == "/v1/work/lease" {
        gate.leases.fetch_add(1, SeqCst);
    }
    if path == "/v1/work/reports" && gate.refusing.load(SeqCst) {
        if gate.ran_second.load(SeqCst) {
            gate.refused_after.fetch_add(1, SeqCst);
        }
        return actix_web::HttpResponse::ServiceUnavailable()
            .insert_header(("retry-after", "0"))
            .content_type("application/problem+json")
            .body(
                r#"{"type":"/problems/service-unavailable","title":"Unavailable","status":503}"#,
            );
    }
    let url = format!("{}{}", gate.upstream, request.uri());
    let method =
        reqwest::Method::from_bytes(request.method().as_str().as_bytes()).expect("a method");
    let mut forwarded = reqwest::Client::new().request(method, url).body(body);
    for (name, value) in request.headers() {
        if name != "host" {
            forwarded = forwarded.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = forwarded.send().await.expect("the api answers");
    let mut response = actix_web::HttpResponse::build(
        actix_web::http::StatusCode::from_u16(answer.status().as_u16()).expect("a status"),
    );
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response.insert_header((name.as_str(), value.as_bytes()));
        }
    }
    response.body(answer.bytes().await.expect("the answer's body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_is_free_while_its_report_is_on_its_way_up_to_twice_the_slots_held() {
    use std::sync::atomic::Ordering::SeqCst;
    let (_env, api, client, key) = service_with_key().await;
    let gate = actix_web::web::Data::new(ReportsGate {
        upstream: api.base.clone(),
        refusing: true.into(),
        ..ReportsGate::default()
    });
    let (addr, _server) = testkit::serve_on_loopback(gate.clone(), through_gate);
    let quick = receipt_client::RetryPolicy {
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..receipt_client::RetryPolicy::default()
    };
    let work = Client::builder(&format!("http://{addr}"), &key)
        .retry(quick)
        .build()
        .expect("a worker's client");
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let worker = Worker::new(work, "rust-3").concurrency(1).kind("numbers", {
        let (ran, gate) = (ran.clone(), gate.clone());
        move |attempt| {
            let n = attempt.params["n"].as_i64().unwrap_or(0);
            ran.lock().unwrap().push(n);
            if n == 2 {
                gate.ran_second.store(true, SeqCst);
            }
            async move { Ok::<_, WorkError>(Output::from(json!({"n": n}))) }
        }
    });
    let mut jobs = Vec::new();
    for n in 1..=3 {
        let submit = receipt_client::Submit::json("numbers", json!({"n": n}));
        jobs.push(client.submit(submit).await.expect("a submit").job_id);
    }
    let (stop, running) = start_worker(worker);

    // One slot: the second attempt runs while the first is reported.
    testkit::wait::until_true(
        "the second attempt run",
        Duration::from_secs(20),
        async || ran.lock().unwrap().contains(&2),
    )
    .await;
    // Two held (one reporting, one waiting to): no third lease, however
    // often the first report is tried meanwhile.
    testkit::wait::until_true(
        "the first report refused twice more",
        Duration::from_secs(20),
        async || gate.refused_after.load(SeqCst) >= 2,
    )
    .await;
    assert_eq!(*ran.lock().unwrap(), [1, 2]);
    assert_eq!(gate.leases.load(SeqCst), 2);
    gate.refusing.store(false, SeqCst);
    for job in &jobs {
        let done = client
            .wait(job, Duration::from_secs(30))
            .await
            .expect("the job");
        assert_eq!(done.status, JobStatus::Succeeded);
    }
    assert_eq!(*ran.lock().unwrap(), [1, 2, 3]);
    stop_worker(stop, running).await;
}
