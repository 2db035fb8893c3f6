//! Sagas (`docs/sagas.md`) through `period-close`, run by the worker in
//! the test's task: each step once, a step's retries inside its attempt,
//! compensations of the steps done when a step fails for good, and the
//! fence that keeps a stale attempt from writing. The filing endpoint is a
//! receiver on 127.0.0.1 inside the test that answers from a script and
//! deduplicates filings by their Idempotency-Key, as a real one would.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use actix_web::{HttpRequest, HttpResponse, dev::ServerHandle, web};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use shared::model::JobStatus;
use store::{Fence, SagaPhase, SagaStep, Store, TurnBack};
use testkit::{Backend, Record, TestEnv, headers_of, serve_on_loopback};
use tokio::sync::Semaphore;
use worker::{Runner, drive::run_due_jobs};

use crate::{
    harness::{error_of, job, runner, status_and_attempts, submit},
    on_both_backends,
};

on_both_backends!(
    a_month_is_locked_summarised_filed_once_and_recorded,
    a_refused_filing_fails_the_job_and_compensates_the_steps_done,
    a_filing_that_fails_twice_then_succeeds_is_filed_once_with_one_key,
    a_failing_compensation_is_retried_until_it_succeeds,
    a_filing_reference_over_255_characters_is_an_invalid_answer,
    a_stale_attempt_can_neither_record_a_step_nor_start_a_compensation,
    an_attempt_whose_lease_lapsed_mid_filing_records_nothing_and_the_next_files_once,
);

// -------------------------------------------------------------- receiver

/// What the receiver answers to a filing or a withdrawal it has not seen.
#[derive(Debug, Clone)]
enum Answer {
    /// 200 with a reference (a filing); 200, or 404 for a filing it never
    /// took (a withdrawal).
    Accept,
    Status(u16),
    /// Takes the filing, and answers as [`Answer::Accept`] once the test
    /// lets it ([`Receiver::answer_held`]).
    Hold,
    /// 200 with a reference of 300 characters.
    LongReference,
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
    /// Filings taken, by Idempotency-Key: the receiver's reference.
    taken: HashMap<String, String>,
}

struct Shared {
    log: Mutex<Log>,
    requests: Record<Received>,
    /// Held answers wait for a permit.
    held: Semaphore,
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
    let raw = String::from_utf8_lossy(&body).into_owned();
    let received = Received {
        headers: headers_of(&request),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    };
    let key = received.key().to_owned();
    let answer = {
        let mut log = shared.log.lock().unwrap();
        shared.requests.push(received.clone());
        if received.kind() == "gst.return" {
            // A filing it took already: the same answer, nothing new filed.
            if let Some(reference) = log.taken.get(&key) {
                return HttpResponse::Ok().json(json!({"reference": reference}));
            }
            let answer = log.filings.pop_front().unwrap_or(log.filings_then.clone());
            if matches!(answer, Answer::Accept | Answer::Hold) {
                let reference = format!("ref-{}", log.taken.len() + 1);
                log.taken.insert(key.clone(), reference);
            }
            answer
        } else {
            let answer = log.withdrawals.pop_front().unwrap_or(Answer::Accept);
            let filed = received.body["filing_idempotency_key"]
                .as_str()
                .is_some_and(|k| log.taken.contains_key(k));
            match answer {
                Answer::Accept if !filed => Answer::Status(404),
                other => other,
            }
        }
    };
    if matches!(answer, Answer::Hold) {
        let _permit = shared.held.acquire().await;
    }
    match answer {
        Answer::Accept | Answer::Hold => {
            let reference = shared.log.lock().unwrap().taken.get(&key).cloned();
            HttpResponse::Ok().json(json!({"reference": reference}))
        }
        Answer::Status(code) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).expect("a status"))
                .body(format!("scripted {code}"))
        }
        Answer::LongReference => HttpResponse::Ok().json(json!({"reference": "x".repeat(300)})),
    }
}

impl Receiver {
    fn start(filings: &[Answer], filings_then: Answer, withdrawals: &[Answer]) -> Self {
        let shared = Arc::new(Shared {
            log: Mutex::new(Log {
                filings: filings.iter().cloned().collect(),
                filings_then,
                withdrawals: withdrawals.iter().cloned().collect(),
                taken: HashMap::new(),
            }),
            requests: Record::default(),
            held: Semaphore::new(0),
        });
        let (addr, handle) = serve_on_loopback(web::Data::from(shared.clone()), receive);
        Receiver {
            url: format!("http://{addr}/returns"),
            shared,
            handle: Some(handle),
        }
    }

    fn of_kind(&self, kind: &str) -> Vec<Received> {
        self.shared
            .requests
            .all()
            .into_iter()
            .filter(|r| r.kind() == kind)
            .collect()
    }

    /// Filings taken (each key once).
    fn filed(&self) -> usize {
        self.shared.log.lock().unwrap().taken.len()
    }

    async fn wait_for(&self, n: usize) {
        self.shared
            .requests
            .wait_for(n, Duration::from_secs(30))
            .await;
    }

    /// Lets every held answer (and any held later) go.
    fn answer_held(&self) {
        self.shared.held.add_permits(1_000);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.answer_held();
        if let Some(handle) = self.handle.take() {
            std::mem::drop(handle.stop(false));
        }
    }
}

// --------------------------------------------------------------- helpers

const MONTH: &str = "2026-10";

/// Two entries in the month and a filing endpoint at the receiver, as the
/// API would store them; returns the endpoint's secret.
async fn prepare(store: &Store, receiver: &Receiver) -> String {
    let entries = [
        json!({"id": "inv-1", "date": "2026-10-03", "direction": "sale", "amount": "1000.00",
               "gst_rate": "18", "interstate": false}),
        json!({"id": "bill-1", "date": "2026-10-05", "direction": "purchase", "amount": "500.00",
               "gst_rate": "18", "interstate": true}),
    ]
    .iter()
    .map(|entry| {
        serde_json::from_value::<shared::ledger::LedgerEntryInput>(entry.clone())
            .expect("an entry")
            .validate("entries[0]")
            .expect("valid")
            .0
    })
    .collect::<Vec<_>>();
    let mut tx = store.begin_write().await.expect("begin");
    store
        .import_entries(&mut tx, "tenant-a", &entries)
        .await
        .expect("import");
    tx.commit().await.expect("commit");
    store
        .put_filing_endpoint("tenant-a", &receiver.url, &store::Actor::Command("test"))
        .await
        .expect("the filing endpoint")
        .secret
}

async fn close_month(store: &Store) -> String {
    submit(store, "period-close", json!({"month": MONTH})).await
}

fn step<'a>(steps: &'a [SagaStep], name: &str) -> &'a SagaStep {
    steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
}

async fn steps(store: &Store, job_id: &str) -> (Option<SagaPhase>, Vec<SagaStep>) {
    let (run, steps) = store.saga_state(job_id).await.expect("the saga");
    (run.map(|run| run.phase), steps)
}

/// Whether imports into the month are refused (it is locked or closed).
async fn month_refuses_imports(store: &Store) -> bool {
    let mut tx = store.begin_write().await.expect("begin");
    let refusing = store
        .periods_refusing_imports(&mut tx, "tenant-a", &[MONTH.to_owned()])
        .await
        .expect("periods");
    tx.rollback().await.expect("rollback");
    !refusing.is_empty()
}

/// The month compensated: no longer locked, imports taken again.
async fn assert_month_open(store: &Store) {
    assert!(
        !month_refuses_imports(store).await,
        "the month is still locked"
    );
}

// ----------------------------------------------------------------- tests

async fn a_month_is_locked_summarised_filed_once_and_recorded(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let receiver = Receiver::start(&[], Answer::Accept, &[]);
    let secret = prepare(store, &receiver).await;
    let job_id = close_month(store).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(
        status_and_attempts(store, &job_id).await,
        (JobStatus::Succeeded, 1)
    );
    let (phase, steps) = steps(store, &job_id).await;
    assert_eq!(phase, Some(SagaPhase::Completed));
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["lock", "summarise", "file", "record"]);
    for s in &steps {
        assert_eq!((s.outcome.as_str(), s.attempts), ("done", 1), "{s:?}");
        assert_eq!(s.compensation, "none", "{s:?}");
    }
    // Filed once, with the step's key, signed with the endpoint's secret.
    let filings = receiver.of_kind("gst.return");
    assert_eq!(filings.len(), 1, "{filings:?}");
    let filing = &filings[0];
    assert_eq!(filing.key(), format!("{job_id}:file"));
    standardwebhooks::Webhook::new(&secret)
        .expect("the secret")
        .verify(filing.raw.as_bytes(), &filing.headers)
        .expect("the filing is signed as a webhook is");
    // The summary is gst-summary's, computed the same way.
    let gst_id = submit(store, "gst-summary", json!({"month": MONTH})).await;
    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);
    let gst: Value = serde_json::from_str(
        &store
            .job_result("tenant-a", &gst_id)
            .await
            .unwrap()
            .expect("the summary"),
    )
    .unwrap();
    assert_eq!(filing.body["summary"], gst);
    let summarised: Value =
        serde_json::from_str(step(&steps, "summarise").output.as_deref().expect("output")).unwrap();
    assert_eq!(summarised, gst);
    // Recorded, with the receiver's reference.
    let closed = store
        .get_period("tenant-a", MONTH)
        .await
        .unwrap()
        .expect("the period");
    assert_eq!(closed.state, "closed");
    assert_eq!(closed.job_id, job_id);
    assert_eq!(closed.filing_reference.as_deref(), Some("ref-1"));
    let result: Value = serde_json::from_str(
        &store
            .job_result("tenant-a", &job_id)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(result["filing_reference"], "ref-1");
    assert_eq!(result["summary"], gst);
    assert!(month_refuses_imports(store).await);
    assert!(receiver.of_kind("gst.withdrawal").is_empty());
}

async fn a_refused_filing_fails_the_job_and_compensates_the_steps_done(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let receiver = Receiver::start(&[], Answer::Status(422), &[]);
    prepare(store, &receiver).await;
    let job_id = close_month(store).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(
        status_and_attempts(store, &job_id).await,
        (JobStatus::Failed, 1)
    );
    let (error_type, _) = error_of(store, &job_id).await.expect("an error");
    assert_eq!(error_type, "filing_refused");
    let (phase, steps) = steps(store, &job_id).await;
    assert_eq!(phase, Some(SagaPhase::Compensated));
    for name in ["lock", "summarise"] {
        let s = step(&steps, name);
        assert_eq!(
            (s.outcome.as_str(), s.compensation.as_str()),
            ("done", "done"),
            "{s:?}"
        );
    }
    let file = step(&steps, "file");
    assert_eq!(file.outcome, "failed", "{file:?}");
    assert_eq!(file.attempts, 1, "a refusal is not retried");
    assert_eq!(file.error_type.as_deref(), Some("filing_refused"));
    assert_eq!(
        file.compensation, "none",
        "a refused filing is not withdrawn"
    );
    assert!(
        steps.iter().all(|s| s.name != "record"),
        "record never started: {steps:?}"
    );
    assert_eq!(receiver.of_kind("gst.return").len(), 1);
    assert!(receiver.of_kind("gst.withdrawal").is_empty());
    assert_month_open(store).await;
}

async fn a_filing_that_fails_twice_then_succeeds_is_filed_once_with_one_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let receiver = Receiver::start(
        &[Answer::Status(503), Answer::Status(503)],
        Answer::Accept,
        &[],
    );
    prepare(store, &receiver).await;
    let job_id = close_month(store).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(
        status_and_attempts(store, &job_id).await,
        (JobStatus::Succeeded, 1),
        "the retries are the step's, in one attempt"
    );
    let filings = receiver.of_kind("gst.return");
    assert_eq!(filings.len(), 3, "{filings:?}");
    assert!(filings.iter().all(|f| f.key() == format!("{job_id}:file")));
    assert_eq!(receiver.filed(), 1);
    let (_, steps) = steps(store, &job_id).await;
    let file = step(&steps, "file");
    assert_eq!((file.outcome.as_str(), file.attempts), ("done", 3));
    let period = store.get_period("tenant-a", MONTH).await.unwrap();
    assert_eq!(period.map(|p| p.state).as_deref(), Some("closed"));
}

async fn a_failing_compensation_is_retried_until_it_succeeds(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
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
    prepare(store, &receiver).await;
    let job_id = close_month(store).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(job(store, &job_id).await.status, JobStatus::Failed);
    let (error_type, _) = error_of(store, &job_id).await.expect("an error");
    assert_eq!(error_type, "filing_unavailable");
    let (phase, steps) = steps(store, &job_id).await;
    assert_eq!(phase, Some(SagaPhase::Compensated));
    let file = step(&steps, "file");
    assert_eq!(file.attempts, 5);
    assert_eq!(file.compensation, "done", "{file:?}");
    assert_eq!(file.compensation_attempts, 4);
    assert_eq!(file.compensation_error_type, None);
    let withdrawals = receiver.of_kind("gst.withdrawal");
    assert_eq!(withdrawals.len(), 4);
    assert!(
        withdrawals
            .iter()
            .all(|w| w.key() == format!("{job_id}:file:compensate"))
    );
    assert_eq!(step(&steps, "lock").compensation, "done");
    assert_month_open(store).await;
}

/// A 2xx answer whose reference is too long is no answer: tried again
/// under the same key, then withdrawn; nothing that long is stored.
async fn a_filing_reference_over_255_characters_is_an_invalid_answer(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let receiver = Receiver::start(&[], Answer::LongReference, &[]);
    prepare(store, &receiver).await;
    let job_id = close_month(store).await;

    assert_eq!(run_due_jobs(&runner).await.expect("run"), 1);

    assert_eq!(job(store, &job_id).await.status, JobStatus::Failed);
    let (error_type, _) = error_of(store, &job_id).await.expect("an error");
    assert_eq!(error_type, "filing_invalid_answer");
    let (_, steps) = steps(store, &job_id).await;
    let file = step(&steps, "file");
    assert_eq!(file.attempts, 5, "{file:?}");
    assert_eq!(file.compensation, "done", "accepted, maybe: withdrawn");
    let long = "x".repeat(300);
    assert!(
        steps
            .iter()
            .all(|s| s.output.as_ref().is_none_or(|o| !o.contains(&long))),
        "{steps:?}"
    );
    assert_eq!(store.get_period("tenant-a", MONTH).await.unwrap(), None);
    assert_month_open(store).await;
}

/// A period-close running its `file` step, whose answer the receiver
/// holds, in a task of its own.
async fn filing_under_way(
    runner: &Arc<Runner>,
    receiver: &Receiver,
) -> (String, tokio::task::JoinHandle<usize>) {
    prepare(&runner.store, receiver).await;
    let job_id = close_month(&runner.store).await;
    let driving = {
        let runner = runner.clone();
        tokio::spawn(async move { run_due_jobs(&runner).await.expect("run") })
    };
    receiver.wait_for(1).await;
    (job_id, driving)
}

async fn a_stale_attempt_can_neither_record_a_step_nor_start_a_compensation(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = Arc::new(runner(&env, "0s").await);
    let store = &runner.store;
    let receiver = Receiver::start(&[Answer::Hold], Answer::Accept, &[]);
    let (job_id, driving) = filing_under_way(&runner, &receiver).await;
    let (_, before) = store.saga_state(&job_id).await.expect("the saga");
    // Attempt 1 is running the filing; attempt 0 is a stale one.
    let stale = Fence {
        job_id: &job_id,
        attempt: 0,
    };

    let started = store.begin_saga_step(stale, 3, "record").await.unwrap();
    let recorded = store.record_saga_step(stale, 2, "{}").await.unwrap();
    let turned_back = store
        .turn_saga_back(stale, &TurnBack::Cancelled)
        .await
        .unwrap();
    let compensating = store.begin_saga_compensation(stale, 0).await.unwrap();

    assert!(!started && !recorded && !turned_back && !compensating);
    let (run, after) = store.saga_state(&job_id).await.expect("the saga");
    assert_eq!(after, before, "nothing of the stale attempt was written");
    assert_eq!(run.map(|r| r.phase), Some(SagaPhase::Forward));
    assert_eq!(after[2].outcome, "running", "the filing is under way");
    // The current attempt goes on to the end.
    receiver.answer_held();
    assert_eq!(driving.await.expect("the drive"), 1);
    assert_eq!(
        status_and_attempts(store, &job_id).await,
        (JobStatus::Succeeded, 1)
    );
}

async fn an_attempt_whose_lease_lapsed_mid_filing_records_nothing_and_the_next_files_once(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let runner = Arc::new(runner(&env, "0s").await);
    let store = &runner.store;
    let receiver = Receiver::start(&[Answer::Hold], Answer::Accept, &[]);
    let (job_id, driving) = filing_under_way(&runner, &receiver).await;

    // Attempt 1 is alive but loses its lease, as after a stall; its
    // heartbeat may extend the lease between the two steps, so again.
    testkit::wait::until_true(
        "the lease of the filing attempt taken away",
        Duration::from_secs(10),
        async || {
            store.expire_lease_now(&job_id).await.unwrap();
            store.requeue_lapsed_leases(100).await.unwrap();
            job(store, &job_id).await.status != JobStatus::Running
        },
    )
    .await;
    receiver.answer_held();

    // Attempt 1 writes nothing; attempt 2 goes on from the step it was on.
    assert_eq!(driving.await.expect("the drive"), 2);
    assert_eq!(
        status_and_attempts(store, &job_id).await,
        (JobStatus::Succeeded, 2)
    );
    let filings = receiver.of_kind("gst.return");
    assert_eq!(filings.len(), 2, "sent again by the next attempt");
    assert!(filings.iter().all(|f| f.key() == format!("{job_id}:file")));
    assert_eq!(receiver.filed(), 1, "the receiver deduplicated on the key");
    let (_, steps) = steps(store, &job_id).await;
    for name in ["lock", "summarise"] {
        assert_eq!(step(&steps, name).attempts, 1, "{name} ran once");
    }
    let file = step(&steps, "file");
    assert_eq!((file.outcome.as_str(), file.attempts), ("done", 2));
    assert!(steps.iter().all(|s| s.outcome == "done"), "{steps:?}");
    let closed = store.get_period("tenant-a", MONTH).await.unwrap().unwrap();
    assert_eq!(closed.filing_reference.as_deref(), Some("ref-1"));
}
