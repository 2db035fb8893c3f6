//! Sagas (`docs/sagas.md`) through `period-close` (`docs/api.md`, Closing
//! a month), end to end: a filing receiver on 127.0.0.1 (an actix-web
//! server inside the test) records every request, answers from a script,
//! and deduplicates filings by their Idempotency-Key as a real one would.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use actix_web::{HttpRequest, HttpResponse, dev::ServerHandle, web};
use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::{Value, json};

use crate::common::{Api, Backend, Process, Record, TestEnv, headers_of, serve_on_loopback};

// -------------------------------------------------------------- receiver

/// What the receiver answers to a filing or a withdrawal it has not seen.
#[derive(Debug, Clone)]
enum Answer {
    /// 200 with a reference (a filing); 200, or 404 for a filing it never
    /// took (a withdrawal).
    Accept,
    Status(u16),
    /// Takes the filing, then holds the answer far longer than the test.
    Hang,
    /// Answers 200 with a body of this many bytes, made as it is sent
    /// (chunked, no Content-Length), to every try.
    Huge(usize),
}

#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: Value,
    raw: String,
}

impl Received {
    fn key(&self) -> &str {
        self.headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .expect("an Idempotency-Key")
    }

    fn kind(&self) -> &str {
        self.body["type"].as_str().expect("a type")
    }
}

struct Log {
    filings: VecDeque<Answer>,
    filings_then: Answer,
    withdrawals: VecDeque<Answer>,
    withdrawals_then: Answer,
    /// Filings taken, by Idempotency-Key: the receiver's reference.
    taken: HashMap<String, String>,
}

/// The script and what came, shared with the server.
struct Shared {
    log: Mutex<Log>,
    requests: Record<Received>,
}

struct Receiver {
    url: String,
    shared: Arc<Shared>,
    handle: Option<ServerHandle>,
}

async fn receive(
    shared: web::Data<Shared>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let log = &shared.log;
    let headers = headers_of(&request);
    let raw = String::from_utf8_lossy(&body).into_owned();
    let received = Received {
        headers,
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    };
    let key = received.key().to_owned();
    let answer = {
        let mut log = log.lock().unwrap();
        shared.requests.push(received.clone());
        if received.kind() == "gst.return" {
            // A filing it took already: the same answer, nothing new filed.
            if let Some(reference) = log.taken.get(&key) {
                return HttpResponse::Ok().json(json!({"reference": reference}));
            }
            let answer = log.filings.pop_front().unwrap_or(log.filings_then.clone());
            if matches!(answer, Answer::Accept | Answer::Hang) {
                let reference = format!("ref-{}", log.taken.len() + 1);
                log.taken.insert(key.clone(), reference);
            }
            answer
        } else {
            let answer = log
                .withdrawals
                .pop_front()
                .unwrap_or(log.withdrawals_then.clone());
            let filed = received.body["filing_idempotency_key"]
                .as_str()
                .is_some_and(|k| log.taken.contains_key(k));
            match answer {
                Answer::Accept if !filed => Answer::Status(404),
                other => other,
            }
        }
    };
    match answer {
        Answer::Accept => {
            let reference = log.lock().unwrap().taken.get(&key).cloned();
            HttpResponse::Ok().json(json!({"reference": reference}))
        }
        Answer::Status(code) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).expect("a status"))
                .body(format!("scripted {code}"))
        }
        Answer::Hang => {
            // A receiver that never answers in time: it holds the request.
            tokio::time::sleep(Duration::from_secs(120)).await;
            HttpResponse::Ok().finish()
        }
        Answer::Huge(bytes) => HttpResponse::Ok()
            .content_type("application/json")
            .streaming(huge_body(bytes)),
    }
}

/// `{"reference": "xxx…"}` of `bytes` bytes, in 64 KiB chunks.
pub fn huge_body(
    bytes: usize,
) -> impl futures::Stream<Item = Result<web::Bytes, std::convert::Infallible>> {
    const CHUNK: usize = 64 * 1024;
    let head = web::Bytes::from_static(br#"{"reference": ""#);
    let tail = web::Bytes::from_static(br#""}"#);
    let middle = bytes.saturating_sub(head.len() + tail.len());
    let filler = web::Bytes::from(vec![b'x'; CHUNK]);
    let chunks =
        (0..middle.div_ceil(CHUNK)).map(move |i| Ok(filler.slice(..CHUNK.min(middle - i * CHUNK))));
    futures::stream::iter(
        std::iter::once(Ok(head))
            .chain(chunks)
            .chain(std::iter::once(Ok(tail))),
    )
}

impl Receiver {
    fn start(filings: &[Answer], filings_then: Answer, withdrawals: &[Answer]) -> Self {
        let shared = Arc::new(Shared {
            log: Mutex::new(Log {
                filings: filings.iter().cloned().collect(),
                filings_then,
                withdrawals: withdrawals.iter().cloned().collect(),
                withdrawals_then: Answer::Accept,
                taken: HashMap::new(),
            }),
            requests: Record::default(),
        });
        let (addr, handle) = serve_on_loopback(web::Data::from(shared.clone()), receive);
        Receiver {
            url: format!("http://{addr}/returns"),
            shared,
            handle: Some(handle),
        }
    }

    fn requests(&self) -> Vec<Received> {
        self.shared.requests.all()
    }

    fn of_kind(&self, kind: &str) -> Vec<Received> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind() == kind)
            .collect()
    }

    /// Filings taken (each key once).
    fn filed(&self) -> usize {
        self.shared.log.lock().unwrap().taken.len()
    }

    async fn wait_for(&self, n: usize) -> Vec<Received> {
        self.shared
            .requests
            .wait_for(n, Duration::from_secs(30))
            .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            std::mem::drop(handle.stop(false));
        }
    }
}

// --------------------------------------------------------------- helpers

/// Filing endpoints on 127.0.0.1 are allowed as webhooks to 127.0.0.1 are
/// in the webhook tests; retries come quickly (50 ms doubling to 200 ms).
const SETTINGS: [(&str, &str); 2] = [("WEBHOOK_ALLOW_PRIVATE", "true"), ("WEBHOOK_TIMEOUT", "5s")];

const MONTH: &str = "2026-10";

async fn embedded(env: &TestEnv) -> Api {
    let mut settings = SETTINGS.to_vec();
    settings.push(("EMBEDDED_WORKER", "true"));
    env.start_api(&settings).await
}

fn entry(id: &str, date: &str) -> Value {
    json!({"id": id, "date": date, "direction": "sale", "amount": "1000.00",
           "gst_rate": "18", "interstate": false})
}

/// Two entries in the month, a filing endpoint at the receiver; returns
/// the endpoint's secret.
async fn prepare(api: &Api, receiver: &Receiver) -> String {
    let reply = api
        .import(json!([
            entry("inv-1", "2026-10-03"),
            {"id": "bill-1", "date": "2026-10-05", "direction": "purchase", "amount": "500.00",
             "gst_rate": "18", "interstate": true}
        ]))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = api
        .send(
            Method::PUT,
            "/v1/filing-endpoint",
            Some(&json!({"url": receiver.url})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()["secret"]
        .as_str()
        .expect("the secret")
        .to_owned()
}

async fn close_month(api: &Api) -> String {
    let job = api.submit("period-close", json!({"month": MONTH})).await;
    job["job_id"].as_str().expect("job_id").to_owned()
}

async fn period(api: &Api) -> Value {
    let reply = api.get(&format!("/v1/periods/{MONTH}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()
}

/// The step of this name in the job object.
fn step<'a>(job: &'a Value, name: &str) -> &'a Value {
    job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {job}"))
}

/// The job object with its steps, once final.
async fn finished(api: &Api, job_id: &str) -> Value {
    api.wait_final(job_id).await;
    api.job(job_id).await
}

/// A period-close whose filing the receiver holds: the job is running
/// its `file` step.
async fn filing_under_way(env: &TestEnv) -> (Api, Receiver, String) {
    let api = embedded(env).await;
    let receiver = Receiver::start(&[Answer::Hang], Answer::Accept, &[]);
    prepare(&api, &receiver).await;
    let job_id = close_month(&api).await;
    receiver.wait_for(1).await;
    (api, receiver, job_id)
}

async fn assert_imports_work_again(api: &Api) {
    assert_eq!(period(api).await["state"], "open");
    let reply = api.import(json!([entry("inv-after", "2026-10-20")])).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

// ----------------------------------------------------------------- tests

async fn a_month_is_locked_summarised_filed_once_and_recorded(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env).await;
    let receiver = Receiver::start(&[], Answer::Accept, &[]);
    let secret = prepare(&api, &receiver).await;

    let job_id = close_month(&api).await;
    let job = finished(&api, &job_id).await;

    assert_eq!(job["status"], "SUCCEEDED", "{job}");
    assert_eq!(job["phase"], "completed");
    let names: Vec<&str> = job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["lock", "summarise", "file", "record"]);
    for s in job["steps"].as_array().expect("steps") {
        assert_eq!(s["outcome"], "done", "{s}");
        assert_eq!(s["attempts"], 1, "{s}");
        assert_eq!(s["compensation"], Value::Null, "{s}");
    }
    // Filed once, with the step's key, signed with the endpoint's secret.
    let filings = receiver.requests();
    assert_eq!(filings.len(), 1, "{filings:?}");
    let filing = &filings[0];
    assert_eq!(filing.key(), format!("{job_id}:file"));
    standardwebhooks::Webhook::new(&secret)
        .expect("the secret")
        .verify(filing.raw.as_bytes(), &filing.headers)
        .expect("the filing is signed as a webhook is");
    // The summary is gst-summary's, computed the same way.
    let gst = api.submit("gst-summary", json!({"month": MONTH})).await;
    let gst_id = gst["job_id"].as_str().expect("job_id");
    assert_eq!(api.wait_final(gst_id).await["status"], "SUCCEEDED");
    let gst_result = api.get(&format!("/v1/jobs/{gst_id}/result")).await.json();
    assert_eq!(filing.body["summary"], gst_result);
    assert_eq!(step(&job, "summarise")["output"], gst_result);
    // Recorded, with the receiver's reference.
    let closed = period(&api).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    assert_eq!(closed["job_id"], job_id.as_str());
    assert_eq!(closed["filing_reference"], "ref-1");
    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await.json();
    assert_eq!(result["filing_reference"], "ref-1");
    // Imports into the month are refused, naming it; others are not.
    let refused = api.import(json!([entry("inv-late", "2026-10-30")])).await;
    let problem = refused.assert_problem(409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains(MONTH),
        "{problem}"
    );
    let next_month = api.import(json!([entry("inv-nov", "2026-11-02")])).await;
    assert_eq!(next_month.status, StatusCode::OK, "{}", next_month.text);
    // Closing it again is refused; a retry of the first submit is not.
    let again = api
        .post("/v1/reports/period-close", &json!({"month": MONTH}))
        .await;
    let problem = again.assert_problem(409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("closed"),
        "{problem}"
    );
    // Reopening is an explicit call; then imports work again.
    let reopened = api
        .post(&format!("/v1/periods/{MONTH}/reopen"), &json!({}))
        .await;
    assert_eq!(reopened.status, StatusCode::OK, "{}", reopened.text);
    assert_imports_work_again(&api).await;
    assert_eq!(receiver.requests().len(), 1, "nothing was withdrawn");
    // The audit log says the job closed the month, and which request
    // reopened it; reopening an open month records nothing more.
    let again = api
        .post(&format!("/v1/periods/{MONTH}/reopen"), &json!({}))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    let closed = api.get("/v1/audit?action=period.closed").await.json();
    let closed = closed["data"].as_array().expect("entries");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["actor"], "job");
    assert_eq!(closed[0]["job_id"], job_id.as_str());
    assert_eq!(closed[0]["target"], MONTH);
    assert_eq!(closed[0]["details"]["filing_reference"], "ref-1");
    let opened = api.get("/v1/audit?action=period.reopened").await.json();
    let opened = opened["data"].as_array().expect("entries");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["actor"], "key");
    assert_eq!(
        opened[0]["request_id"].as_str(),
        reopened.header("x-request-id")
    );
    assert_eq!(opened[0]["details"]["closed_by_job"], job_id.as_str());
}

async fn a_retried_submit_of_a_close_that_finished_replays_its_job(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env).await;
    let receiver = Receiver::start(&[], Answer::Accept, &[]);
    prepare(&api, &receiver).await;
    let submit = || {
        api.client
            .post(api.url("/v1/reports/period-close"))
            .bearer_auth(&api.key)
            .header("idempotency-key", "close-october")
            .json(&json!({"month": MONTH}))
    };

    let first = Api::read(submit()).await;
    let job_id = first.json()["job_id"].as_str().expect("job_id").to_owned();
    assert_eq!(api.wait_final(&job_id).await["status"], "SUCCEEDED");
    let retry = Api::read(submit()).await;

    assert_eq!(retry.status, StatusCode::ACCEPTED, "{}", retry.text);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["job_id"], job_id.as_str());
    assert_eq!(receiver.requests().len(), 1);
}

async fn a_filing_that_fails_twice_then_succeeds_is_filed_once_with_one_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env).await;
    let receiver = Receiver::start(
        &[Answer::Status(503), Answer::Status(503)],
        Answer::Accept,
        &[],
    );
    prepare(&api, &receiver).await;

    let job_id = close_month(&api).await;
    let job = finished(&api, &job_id).await;

    assert_eq!(job["status"], "SUCCEEDED", "{job}");
    let filings = receiver.requests();
    assert_eq!(filings.len(), 3, "{filings:?}");
    for filing in &filings {
        assert_eq!(filing.key(), format!("{job_id}:file"));
    }
    assert_eq!(receiver.filed(), 1);
    assert_eq!(step(&job, "file")["attempts"], 3);
    assert_eq!(step(&job, "file")["outcome"], "done");
    assert_eq!(
        job["attempts"], 1,
        "the retries are the step's, in one attempt"
    );
    assert_eq!(period(&api).await["state"], "closed");
}

/// A filing endpoint that answers 200 with 50 MB costs the process that
/// files little memory (the answer is read to 64 KiB, then dropped), and
/// is no answer: tried again under the same key, then withdrawn.
async fn an_over_size_filing_answer_is_an_invalid_answer_read_to_a_bound(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let pool = Pool::start(&env).await;
    let receiver = Receiver::start(&[], Answer::Huge(50_000_000), &[]);
    prepare(&pool.api, &receiver).await;
    let before = pool.filer().peak_rss_bytes();

    let job_id = close_month(&pool.api).await;
    let job = finished(&pool.api, &job_id).await;

    let growth = pool.filer().peak_rss_bytes().saturating_sub(before);
    assert!(
        growth < 20_000_000,
        "peak memory grew by {growth} bytes for a 50 MB answer"
    );
    assert_eq!(job["status"], "FAILED", "{job}");
    assert_eq!(job["error"]["type"], "filing_invalid_answer", "{job}");
    let file = step(&job, "file");
    assert_eq!(file["attempts"], 5, "{job}");
    assert_eq!(
        file["compensation"]["outcome"], "done",
        "accepted, maybe: withdrawn"
    );
    assert_eq!(receiver.of_kind("gst.withdrawal").len(), 1);
    assert_eq!(period(&pool.api).await["state"], "open");
}

/// The api and where the worker pool runs: inside it on SQLite, in a
/// `worker` process on Postgres + Redis; either way, killable with -9.
struct Pool {
    api: Api,
    worker: Option<Process>,
}

impl Pool {
    async fn start(env: &TestEnv) -> Self {
        match env.backend {
            Backend::Sqlite => Pool {
                api: embedded(env).await,
                worker: None,
            },
            Backend::PgRedis => {
                let mut settings = SETTINGS.to_vec();
                settings.push(("EMBEDDED_WORKER", "false"));
                Pool {
                    api: env.start_api(&settings).await,
                    worker: Some(env.start_worker(&SETTINGS)),
                }
            }
        }
    }

    /// The process that runs the saga, and so files.
    fn filer(&self) -> &Process {
        match &self.worker {
            Some(worker) => worker,
            None => self.api.process.as_ref().expect("the api"),
        }
    }

    /// SIGKILL of the process running the pool, then a new one; the
    /// attempt it ran is taken over when its lease lapses (`JOB_LEASE`, 3 s).
    async fn kill_and_restart(&mut self, env: &TestEnv) {
        match self.worker.as_mut() {
            Some(worker) => {
                worker.kill_hard();
                self.worker = Some(env.start_worker(&SETTINGS));
            }
            None => {
                self.api.process.as_mut().expect("the api").kill_hard();
                self.api = embedded(env).await;
            }
        }
    }
}

async fn a_worker_killed_after_filing_resends_with_the_same_key_and_records_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // The filing is held by the receiver until the worker is killed: the
    // window between sending and recording, made certain.
    let receiver = Receiver::start(&[Answer::Hang], Answer::Accept, &[]);
    let mut pool = Pool::start(&env).await;
    prepare(&pool.api, &receiver).await;
    let job_id = close_month(&pool.api).await;
    receiver.wait_for(1).await;

    pool.kill_and_restart(&env).await;
    let api = &pool.api;
    let job = finished(api, &job_id).await;

    assert_eq!(job["status"], "SUCCEEDED", "{job}");
    assert_eq!(job["attempts"], 2, "{job}");
    let filings = receiver.of_kind("gst.return");
    assert_eq!(filings.len(), 2, "sent again by the next attempt");
    assert!(filings.iter().all(|f| f.key() == format!("{job_id}:file")));
    assert_eq!(receiver.filed(), 1, "the receiver deduplicated on the key");
    let file = step(&job, "file");
    assert_eq!(file["outcome"], "done");
    assert_eq!(file["attempts"], 2);
    for name in ["lock", "summarise"] {
        assert_eq!(step(&job, name)["attempts"], 1, "{name} ran once");
    }
    let closed = period(api).await;
    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["filing_reference"], "ref-1");
    assert_eq!(
        env.count(&format!(
            "SELECT COUNT(*) FROM saga_steps WHERE job_id = '{job_id}' AND outcome = 'done'"
        ))
        .await,
        4
    );
}

async fn a_failing_compensation_is_retried_until_it_succeeds(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env).await;
    // Filings always 503: after 5 tries the filing's outcome is unknown,
    // so it is withdrawn; the first three withdrawals fail.
    let receiver = Receiver::start(
        &[],
        Answer::Status(503),
        &[
            Answer::Status(500),
            Answer::Status(502),
            Answer::Status(500),
        ],
    );
    prepare(&api, &receiver).await;

    let job_id = close_month(&api).await;
    let job = finished(&api, &job_id).await;

    assert_eq!(job["status"], "FAILED", "{job}");
    assert_eq!(job["error"]["type"], "filing_unavailable");
    let file = step(&job, "file");
    assert_eq!(file["attempts"], 5);
    let compensation = &file["compensation"];
    assert_eq!(compensation["outcome"], "done", "{file}");
    assert_eq!(compensation["attempts"], 4);
    assert_eq!(compensation["error"], Value::Null);
    let withdrawals = receiver.of_kind("gst.withdrawal");
    assert_eq!(withdrawals.len(), 4);
    assert!(
        withdrawals
            .iter()
            .all(|w| w.key() == format!("{job_id}:file:compensate"))
    );
    assert_eq!(step(&job, "lock")["compensation"]["outcome"], "done");
    assert_imports_work_again(&api).await;
    let metrics = Api::read(api.client.get(api.url("/metrics"))).await.text;
    let failed = metrics
        .lines()
        .find(|l| {
            l.starts_with("receipt_saga_compensations_total")
                && l.contains("step=\"file\"")
                && l.contains("outcome=\"failed\"")
        })
        .unwrap_or_else(|| panic!("no failed compensations counted:\n{metrics}"));
    assert!(failed.ends_with(" 3"), "{failed}");
}

async fn a_cancel_mid_saga_runs_the_compensations(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let (api, receiver, job_id) = filing_under_way(&env).await;
    assert_eq!(period(&api).await["state"], "locked");
    let while_locked = api.import(json!([entry("inv-mid", "2026-10-12")])).await;
    let problem = while_locked.assert_problem(409);
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("2026-10 is being closed"), "{problem}");

    let reply = api
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let job = finished(&api, &job_id).await;

    assert_eq!(job["status"], "CANCELLED", "{job}");
    assert_eq!(job["phase"], "compensated");
    let file = step(&job, "file");
    assert_eq!(file["outcome"], "failed");
    assert_eq!(file["error"]["type"], "cancelled");
    // Stopped mid-filing: withdrawn, with the compensation's own key.
    assert_eq!(file["compensation"]["outcome"], "done");
    let withdrawals = receiver.of_kind("gst.withdrawal");
    assert_eq!(withdrawals.len(), 1);
    assert_eq!(withdrawals[0].key(), format!("{job_id}:file:compensate"));
    assert_eq!(step(&job, "lock")["compensation"]["outcome"], "done");
    assert_eq!(step(&job, "record")["outcome"], "pending");
    assert_imports_work_again(&api).await;
}

async fn a_worker_killed_while_compensating_goes_on_compensating_in_the_next_attempt(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    // Every filing fails (503), so the filing is withdrawn; the first
    // withdrawal is held until the worker is killed.
    let receiver = Receiver::start(&[], Answer::Status(503), &[Answer::Hang]);
    let mut pool = Pool::start(&env).await;
    prepare(&pool.api, &receiver).await;
    let job_id = close_month(&pool.api).await;
    // Five filings, then the withdrawal.
    receiver.wait_for(6).await;
    let compensating = pool.api.job(&job_id).await;
    assert_eq!(compensating["status"], "RUNNING");
    assert_eq!(compensating["phase"], "compensating");

    pool.kill_and_restart(&env).await;
    let job = finished(&pool.api, &job_id).await;

    assert_eq!(job["status"], "FAILED", "{job}");
    assert_eq!(job["error"]["type"], "filing_unavailable");
    assert_eq!(job["phase"], "compensated");
    assert_eq!(job["attempts"], 2);
    let withdrawals = receiver.of_kind("gst.withdrawal");
    assert_eq!(withdrawals.len(), 2, "the next attempt sent it again");
    assert!(
        withdrawals
            .iter()
            .all(|w| w.key() == format!("{job_id}:file:compensate"))
    );
    assert_eq!(receiver.of_kind("gst.return").len(), 5, "no step ran again");
    let file = step(&job, "file");
    assert_eq!(file["compensation"]["outcome"], "done");
    assert_eq!(file["compensation"]["attempts"], 2);
    assert_eq!(step(&job, "lock")["compensation"]["attempts"], 1);
    assert_imports_work_again(&pool.api).await;
}

async fn a_cancel_of_a_saga_waiting_for_its_next_attempt_compensates_first(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let receiver = Receiver::start(&[Answer::Hang], Answer::Accept, &[]);
    let mut settings = SETTINGS.to_vec();
    settings.push(("EMBEDDED_WORKER", "false"));
    let api = env.start_api(&settings).await;
    let mut worker = env.start_worker(&SETTINGS);
    prepare(&api, &receiver).await;
    let job_id = close_month(&api).await;
    receiver.wait_for(1).await;
    // A shutdown whose grace (2 s) runs out hands the attempt back: the
    // job waits as QUEUED, mid-filing, with no worker to take it.
    worker.terminate().expect("the worker exits");
    api.wait_status(&job_id, "QUEUED").await;

    let reply = api
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let asked = reply.json();
    assert_eq!(
        asked["status"], "QUEUED",
        "not cancelled before compensating"
    );
    assert_eq!(asked["cancel_requested"], true);
    assert_eq!(period(&api).await["state"], "locked");
    let _worker = env.start_worker(&SETTINGS);
    let job = finished(&api, &job_id).await;

    assert_eq!(job["status"], "CANCELLED", "{job}");
    let file = step(&job, "file");
    assert_eq!(file["outcome"], "failed");
    assert_eq!(file["error"]["type"], "interrupted");
    assert_eq!(file["compensation"]["outcome"], "done", "{file}");
    assert_eq!(receiver.of_kind("gst.withdrawal").len(), 1);
    assert_eq!(receiver.of_kind("gst.return").len(), 1, "not filed again");
    assert_eq!(step(&job, "lock")["compensation"]["outcome"], "done");
    assert_imports_work_again(&api).await;
}

async fn a_saga_whose_attempts_die_until_none_is_left_is_compensated_not_dropped(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let receiver = Receiver::start(&[Answer::Hang], Answer::Accept, &[]);
    let mut pool = Pool::start(&env).await;
    prepare(&pool.api, &receiver).await;
    let job_id = close_month(&pool.api).await;
    receiver.wait_for(1).await;
    // One attempt allowed, and its worker dies mid-filing: the sweeper
    // would fail any other job here.
    env.execute_sql(&format!(
        "UPDATE jobs SET max_attempts = 1 WHERE job_id = '{job_id}'"
    ))
    .await;

    pool.kill_and_restart(&env).await;
    let job = finished(&pool.api, &job_id).await;

    assert_eq!(job["status"], "FAILED", "{job}");
    assert_eq!(job["error"]["type"], "lease_expired");
    assert_eq!(job["phase"], "compensated");
    let file = step(&job, "file");
    assert_eq!(file["error"]["type"], "interrupted");
    assert_eq!(file["compensation"]["outcome"], "done");
    assert_eq!(receiver.of_kind("gst.return").len(), 1, "not filed again");
    assert_eq!(receiver.of_kind("gst.withdrawal").len(), 1);
    assert_imports_work_again(&pool.api).await;
}

async fn a_filing_call_is_a_client_span_of_its_step_that_sends_its_traceparent(backend: Backend) {
    // Arrange: an accepting filing endpoint; the processes export traces.
    let collector = crate::traces::Collector::start();
    let mut env = TestEnv::new(backend).await;
    for (name, value) in collector.settings() {
        env.set(name, value);
    }
    let pool = Pool::start(&env).await;
    let api = &pool.api;
    let receiver = Receiver::start(&[], Answer::Accept, &[]);
    prepare(api, &receiver).await;

    // Act
    let job_id = close_month(api).await;
    assert_eq!(finished(api, &job_id).await["status"], "SUCCEEDED");

    // Assert: run -> step file -> POST, in one trace, and the filing
    // endpoint got the POST span's context.
    let run = collector
        .span("the run", |s| s.name == "run period-close")
        .await;
    let step = collector
        .span("the file step", |s| {
            s.name == "step file" && s.is_child_of(&run)
        })
        .await;
    assert_eq!(step.attribute("receipt.saga.step"), Some("file"));
    let call = collector
        .span("the filing call", |s| {
            s.kind == crate::traces::SpanKind::Client && s.is_child_of(&step)
        })
        .await;
    assert_eq!(call.attribute("http.request.method"), Some("POST"));
    assert_eq!(call.attribute("http.response.status_code"), Some("200"));
    let filing = receiver.of_kind("gst.return");
    let sent = filing[0]
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .expect("the filing carries a traceparent");
    assert_eq!(sent, format!("00-{}-{}-01", call.trace_id, call.span_id));
    collector.stop().await;
}

crate::on_both_backends!(
    a_saga_whose_attempts_die_until_none_is_left_is_compensated_not_dropped,
    a_cancel_of_a_saga_waiting_for_its_next_attempt_compensates_first,
    a_worker_killed_while_compensating_goes_on_compensating_in_the_next_attempt,
    a_month_is_locked_summarised_filed_once_and_recorded,
    a_retried_submit_of_a_close_that_finished_replays_its_job,
    a_worker_killed_after_filing_resends_with_the_same_key_and_records_once,
    a_failing_compensation_is_retried_until_it_succeeds,
    a_cancel_mid_saga_runs_the_compensations,
    an_over_size_filing_answer_is_an_invalid_answer_read_to_a_bound,
    a_filing_call_is_a_client_span_of_its_step_that_sends_its_traceparent,
);

/// Bad input changes nothing and gets a clear answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn period_close_refuses_what_it_cannot_do() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = embedded(&env).await;

    let no_endpoint = api
        .post("/v1/reports/period-close", &json!({"month": MONTH}))
        .await;
    let bad_month = api
        .post("/v1/reports/period-close", &json!({"month": "2026-13"}))
        .await;
    let bad_url = api
        .send(
            Method::PUT,
            "/v1/filing-endpoint",
            Some(&json!({"url": "ftp://example.com"})),
        )
        .await;
    let bad_period = api.get("/v1/periods/october").await;
    let open = api.get(&format!("/v1/periods/{MONTH}")).await;

    let problem = no_endpoint.assert_problem(409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("filing endpoint"),
        "{problem}"
    );
    bad_month.assert_problem(422);
    bad_url.assert_problem(422);
    bad_period.assert_problem(422);
    assert_eq!(open.json()["state"], "open");
    assert_eq!(env.count("SELECT COUNT(*) FROM jobs").await, 0);
}

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(
    a_month_is_locked_summarised_filed_once_and_recorded,
    a_filing_that_fails_twice_then_succeeds_is_filed_once_with_one_key,
);
