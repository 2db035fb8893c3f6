//! The Webhooks section of `docs/api.md`, end to end: a real receiver on
//! 127.0.0.1 (an actix-web server inside the test) records every request
//! and answers from a script, and the `standardwebhooks` crate checks every
//! signature independently of the service's own signing code.

use std::{
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use actix_web::{HttpRequest, HttpResponse, dev::ServerHandle, web};
use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::{Value, json};

use crate::common::{Api, Backend, Record, Reply, TestEnv, headers_of, serve_on_loopback, wait};

// -------------------------------------------------------------- receiver

/// What the receiver answers to one request.
#[derive(Debug, Clone)]
enum Answer {
    Status(u16),
    /// Holds the request open far longer than any `WEBHOOK_TIMEOUT` here.
    Hang,
    /// `307 Temporary Redirect` to this URL.
    Redirect(String),
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: String,
    at: Instant,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    /// `webhook-id`: the event's id.
    fn id(&self) -> &str {
        self.header("webhook-id")
    }

    /// `webhook-timestamp`: unix seconds of this attempt.
    fn timestamp(&self) -> i64 {
        self.header("webhook-timestamp")
            .parse()
            .expect("webhook-timestamp is unix seconds")
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {}", self.body))
    }

    fn job_id(&self) -> String {
        self.json()["data"]["job_id"]
            .as_str()
            .expect("data.job_id")
            .to_owned()
    }

    /// The Standard Webhooks check, by the `standardwebhooks` crate.
    fn verify(&self, secret: &str) -> Result<(), standardwebhooks::WebhookError> {
        standardwebhooks::Webhook::new(secret)?.verify(self.body.as_bytes(), &self.headers)
    }

    fn assert_signed_with(&self, secret: &str) {
        if let Err(error) = self.verify(secret) {
            panic!(
                "the signature of {} does not verify: {error}; headers {:?}",
                self.id(),
                self.headers
            );
        }
    }
}

struct Log {
    script: Mutex<VecDeque<Answer>>,
    then: Answer,
    requests: Record<Received>,
}

/// A webhook receiver on 127.0.0.1, stopped by `stop` (or when dropped).
struct Receiver {
    url: String,
    log: Arc<Log>,
    handle: Option<ServerHandle>,
}

async fn receive(log: web::Data<Log>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    let headers = headers_of(&request);
    let answer = {
        let mut script = log.script.lock().unwrap();
        // Recorded under the script's lock: requests and answers in one order.
        log.requests.push(Received {
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Instant::now(),
        });
        script.pop_front().unwrap_or_else(|| log.then.clone())
    };
    match answer {
        Answer::Status(code) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).expect("a status code"))
                .finish()
        }
        Answer::Hang => {
            // A receiver that never answers in time: it holds the request.
            tokio::time::sleep(Duration::from_secs(120)).await;
            HttpResponse::Ok().finish()
        }
        Answer::Redirect(to) => HttpResponse::TemporaryRedirect()
            .insert_header(("location", to))
            .finish(),
    }
}

impl Receiver {
    /// Answers `script` in order, then `then` to every further request.
    fn start(script: &[Answer], then: Answer) -> Self {
        let log = Arc::new(Log {
            script: Mutex::new(script.iter().cloned().collect()),
            then,
            requests: Record::default(),
        });
        let (addr, handle) = serve_on_loopback(web::Data::from(log.clone()), receive);
        Receiver {
            url: format!("http://{addr}/hooks/receipt"),
            log,
            handle: Some(handle),
        }
    }

    /// Answers 200 to everything.
    fn ok() -> Self {
        Self::start(&[], Answer::Status(200))
    }

    fn requests(&self) -> Vec<Received> {
        self.log.requests.all()
    }

    fn count(&self) -> usize {
        self.log.requests.len()
    }

    /// Waits until at least `n` requests arrived; panics after `within`.
    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        self.log
            .requests
            .wait_until(&format!("{} got {n} requests", self.url), within, |r| {
                r.len() >= n
            })
            .await
    }

    async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), handle.stop(false)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // A test that panicked: ask the server to stop (the command is sent
        // at once; nothing here can wait for it).
        if let Some(handle) = self.handle.take() {
            std::mem::drop(handle.stop(false));
        }
    }
}

// --------------------------------------------------------------- helpers

/// Webhooks to 127.0.0.1, two retries 1 s apart, 2 s to answer.
const WEBHOOKS: [(&str, &str); 3] = [
    ("WEBHOOK_ALLOW_PRIVATE", "true"),
    ("WEBHOOK_RETRY_SCHEDULE", "1s,1s"),
    ("WEBHOOK_TIMEOUT", "2s"),
];

/// How long a delivery that should come may take.
const WAIT: Duration = Duration::from_secs(15);

const ALL_EVENTS: [&str; 3] = ["job.succeeded", "job.failed", "job.cancelled"];

/// `WEBHOOKS` followed by `extra` (a later setting wins).
fn settings<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = WEBHOOKS.to_vec();
    all.extend_from_slice(extra);
    all
}

/// The api with its embedded worker pool (and so a dispatcher).
async fn embedded(env: &TestEnv, extra: &[(&str, &str)]) -> Api {
    let mut all = settings(&[("EMBEDDED_WORKER", "true")]);
    all.extend_from_slice(extra);
    env.start_api(&all).await
}

/// The api alone: events wait for a worker process.
async fn api_alone(env: &TestEnv) -> Api {
    env.start_api(&settings(&[("EMBEDDED_WORKER", "false")]))
        .await
}

async fn register(api: &Api, body: Value) -> Value {
    let reply = api.post("/v1/webhooks", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.json()
}

fn str_of<'a>(value: &'a Value, field: &str) -> &'a str {
    value[field]
        .as_str()
        .unwrap_or_else(|| panic!("no string {field} in {value}"))
}

async fn submit(api: &Api, params: Value) -> String {
    str_of(&api.submit("sleep", params).await, "job_id").to_owned()
}

async fn cancel(api: &Api, job_id: &str) -> Value {
    let reply = api
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()
}

async fn deliveries(api: &Api, webhook_id: &str) -> Vec<Value> {
    let reply = api
        .get(&format!("/v1/webhooks/{webhook_id}/deliveries?limit=200"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()["data"].as_array().expect("data").clone()
}

/// Waits until the delivery log has at least `n` attempts.
async fn wait_deliveries(api: &Api, webhook_id: &str, n: usize) -> Vec<Value> {
    wait::until_ok(
        &format!("{webhook_id} logged {n} attempts"),
        WAIT,
        async || {
            let log = deliveries(api, webhook_id).await;
            if log.len() >= n { Ok(log) } else { Err(log) }
        },
    )
    .await
}

/// Waits until none of these webhooks has an event left to deliver (each
/// delivered, given up, or dropped): an event in flight or due for a retry
/// stays pending until its attempt is recorded, so from then on nothing
/// more reaches their receivers.
async fn settled(env: &TestEnv, webhook_ids: &[&str]) {
    let ids: Vec<String> = webhook_ids.iter().map(|id| format!("'{id}'")).collect();
    let sql = format!(
        "SELECT COUNT(*) FROM webhook_events WHERE state = 'pending' AND webhook_id IN ({})",
        ids.join(",")
    );
    wait::until_true("every event settled", WAIT, async || {
        env.count(&sql).await == 0
    })
    .await;
}

/// Waits until the webhook is disabled.
async fn wait_disabled(api: &Api, webhook_id: &str) {
    let path = format!("/v1/webhooks/{webhook_id}");
    wait::until_true("the webhook disabled", WAIT, async || {
        api.get(&path).await.json()["enabled"] == false
    })
    .await;
}

async fn list_ids(api: &Api) -> Vec<String> {
    let reply = api.get("/v1/webhooks?limit=200").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|w| str_of(w, "id").to_owned())
        .collect()
}

fn time_ms(value: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(value.as_str().expect("a time"))
        .unwrap_or_else(|e| panic!("{value} is not RFC 3339: {e}"))
        .timestamp_millis()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

fn problem_fields(reply: &Reply, status: u16) -> Vec<String> {
    let problem = reply.assert_problem(status);
    problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors in {problem}"))
        .iter()
        .map(|e| str_of(e, "field").to_owned())
        .collect()
}

async fn post_with_key(api: &Api, key: &str, body: &Value) -> Reply {
    Api::read(
        api.client
            .request(Method::POST, api.url("/v1/webhooks"))
            .bearer_auth(&api.key)
            .header("idempotency-key", key)
            .json(body),
    )
    .await
}

// -------------------------------------------------------------- delivery

async fn a_finished_job_is_delivered_once_signed_and_carrying_the_job_object(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let secret = str_of(&webhook, "secret");

    let before = unix_now();
    let job_id = submit(&api, json!({"ms": 10})).await;
    let job = api.wait_final(&job_id).await;
    assert_eq!(job["status"], "SUCCEEDED");

    receiver.wait_for(1, WAIT).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = receiver.requests();
    assert_eq!(received.len(), 1, "exactly one delivery");
    let delivery = &received[0];
    delivery.assert_signed_with(secret);
    assert_eq!(delivery.header("content-type"), "application/json");
    assert!(delivery.id().starts_with("evt_"), "{}", delivery.id());
    let timestamp = delivery.timestamp();
    assert!(
        (before - 1..=unix_now() + 1).contains(&timestamp),
        "webhook-timestamp {timestamp} is the time of the attempt"
    );

    let body = delivery.json();
    let members: BTreeSet<&str> = body
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(members, BTreeSet::from(["type", "timestamp", "data"]));
    assert_eq!(body["type"], "job.succeeded");
    assert_eq!(
        body["data"],
        api.job(&job_id).await,
        "data is the job object"
    );
    assert!(
        time_ms(&body["timestamp"]) >= time_ms(&job["finished_at"]),
        "the event is not older than the job's end: {body}"
    );

    // The verifier is a real one: it refuses a changed body or another key.
    let mut tampered = delivery.clone();
    tampered.body = tampered.body.replace("SUCCEEDED", "FAILED");
    assert!(tampered.verify(secret).is_err(), "a changed body verifies");
    assert!(
        delivery
            .verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .is_err(),
        "another secret verifies"
    );

    let log = wait_deliveries(&api, str_of(&webhook, "id"), 1).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["event_id"], delivery.id());
    assert_eq!(log[0]["event_type"], "job.succeeded");
    assert_eq!(log[0]["attempt"], 1);
    assert_eq!(log[0]["response_status"], 200);
    assert!(log[0]["error"].is_null(), "{}", log[0]);
    assert!(log[0]["next_attempt_at"].is_null(), "{}", log[0]);
    time_ms(&log[0]["attempted_at"]);
    receiver.stop().await;
}

async fn failed_and_cancelled_jobs_announce_job_failed_and_job_cancelled(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;

    // No worker runs yet: this job is cancelled while QUEUED, and its event
    // waits for the worker started below.
    let queued = submit(&api, json!({"ms": 10})).await;
    assert_eq!(cancel(&api, &queued).await["status"], "CANCELLED");

    let _worker = env.start_worker(&WEBHOOKS);
    let failing = submit(&api, json!({"ms": 10, "fail_times": 1, "permanent": true})).await;
    let running = submit(&api, json!({"ms": 20000})).await;
    api.wait_status(&running, "RUNNING").await;
    assert_eq!(cancel(&api, &running).await["cancel_requested"], true);
    assert_eq!(api.wait_final(&failing).await["status"], "FAILED");
    assert_eq!(api.wait_final(&running).await["status"], "CANCELLED");

    receiver.wait_for(3, WAIT).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = receiver.requests();
    assert_eq!(received.len(), 3, "one event per job");
    let mut by_job = HashMap::new();
    for delivery in &received {
        delivery.assert_signed_with(str_of(&webhook, "secret"));
        assert!(delivery.id().starts_with("evt_"));
        by_job.insert(delivery.job_id(), delivery.json());
    }
    for (job_id, event_type) in [
        (&queued, "job.cancelled"),
        (&failing, "job.failed"),
        (&running, "job.cancelled"),
    ] {
        let body = by_job
            .get(job_id)
            .unwrap_or_else(|| panic!("no event for {job_id}"));
        assert_eq!(body["type"], event_type, "{body}");
        assert_eq!(body["data"], api.job(job_id).await);
    }
    assert_eq!(
        by_job[&failing]["data"]["error"]["type"],
        "diagnostic_failure"
    );
    let ids: HashSet<&str> = received.iter().map(Received::id).collect();
    assert_eq!(ids.len(), 3, "each event has its own id");
    receiver.stop().await;
}

// --------------------------------------------------------------- retries

async fn a_receiver_failing_twice_gets_a_third_attempt_of_the_same_event(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::start(
        &[Answer::Status(500), Answer::Status(500)],
        Answer::Status(200),
    );
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let webhook_id = str_of(&webhook, "id");

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;
    receiver.wait_for(3, WAIT).await;
    wait_deliveries(&api, webhook_id, 3).await;
    settled(&env, &[webhook_id]).await;
    let received = receiver.requests();
    assert_eq!(received.len(), 3, "no attempt after the success");

    let event_id = received[0].id().to_owned();
    for (i, delivery) in received.iter().enumerate() {
        assert_eq!(delivery.id(), event_id, "attempt {} has another id", i + 1);
        delivery.assert_signed_with(str_of(&webhook, "secret"));
        assert_eq!(
            delivery.body, received[0].body,
            "every retry sends the same body"
        );
    }
    for pair in received.windows(2) {
        assert!(pair[0].timestamp() <= pair[1].timestamp());
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(850),
            "a retry came {gap:?} after the failure, before the 1 s schedule"
        );
    }
    assert!(
        received[0].timestamp() < received[2].timestamp(),
        "each attempt is signed with its own time"
    );

    let log = deliveries(&api, webhook_id).await;
    assert_eq!(log.len(), 3, "{log:?}");
    let attempts: Vec<&Value> = log.iter().map(|d| &d["attempt"]).collect();
    assert_eq!(attempts, [&json!(3), &json!(2), &json!(1)], "newest first");
    let statuses: Vec<&Value> = log.iter().map(|d| &d["response_status"]).collect();
    assert_eq!(statuses, [&json!(200), &json!(500), &json!(500)]);
    for entry in &log {
        assert_eq!(entry["event_id"], event_id.as_str());
        assert_eq!(entry["event_type"], "job.succeeded");
    }
    assert!(log[0]["next_attempt_at"].is_null(), "{}", log[0]);
    for failed in &log[1..] {
        let delay = time_ms(&failed["next_attempt_at"]) - time_ms(&failed["attempted_at"]);
        assert!(
            (600..=1150).contains(&delay),
            "the next attempt is due 1 s (±10%) later: {delay} ms, {failed}"
        );
    }
    // The log pages newest first, one attempt a page.
    let mut paged = Vec::new();
    let mut path = format!("/v1/webhooks/{webhook_id}/deliveries?limit=1");
    loop {
        let reply = api.get(&path).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let page = reply.json();
        assert_eq!(page["data"].as_array().unwrap().len(), 1, "{page}");
        paged.push(page["data"][0].clone());
        match page["next_cursor"].as_str() {
            Some(cursor) => {
                path = format!("/v1/webhooks/{webhook_id}/deliveries?limit=1&cursor={cursor}")
            }
            None => break,
        }
        assert!(paged.len() < 10, "the cursors do not end");
    }
    assert_eq!(paged, log);
    // Each retry ran once its predecessor's next_attempt_at had come.
    for (older, newer) in [(&log[2], &log[1]), (&log[1], &log[0])] {
        assert!(time_ms(&newer["attempted_at"]) >= time_ms(&older["next_attempt_at"]));
    }
    receiver.stop().await;
}

async fn a_receiver_that_always_fails_gets_one_attempt_more_than_the_schedule_has_delays(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::start(&[], Answer::Status(500));
    let webhook = register(&api, json!({"url": receiver.url})).await;

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;
    receiver.wait_for(3, WAIT).await;
    // Given up after the third attempt: nothing more comes.
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = receiver.requests();
    assert_eq!(
        received.len(),
        3,
        "schedule 1s,1s: three attempts, then none"
    );
    assert!(received.iter().all(|r| r.id() == received[0].id()));

    let log = deliveries(&api, str_of(&webhook, "id")).await;
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log.iter().all(|d| d["response_status"] == 500), "{log:?}");
    assert_eq!(log[0]["attempt"], 3);
    assert!(log[0]["next_attempt_at"].is_null(), "given up: {}", log[0]);
    assert!(log[1]["next_attempt_at"].is_string(), "{}", log[1]);
    receiver.stop().await;
}

async fn a_receiver_answering_410_disables_its_webhook(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let gone = Receiver::start(&[], Answer::Status(410));
    let control = Receiver::ok();
    let webhook = register(&api, json!({"url": gone.url})).await;
    register(&api, json!({"url": control.url})).await;
    assert_eq!(webhook["enabled"], true);

    let first = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&first).await;
    gone.wait_for(1, WAIT).await;
    wait_disabled(&api, str_of(&webhook, "id")).await;
    let log = deliveries(&api, str_of(&webhook, "id")).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["response_status"], 410);
    assert!(log[0]["next_attempt_at"].is_null(), "410 is not retried");

    let second = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&second).await;
    // The control webhook has the later job's event, and the disabled one
    // has nothing left to send.
    control.wait_for(2, WAIT).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    assert_eq!(gone.count(), 1, "a disabled webhook gets nothing more");
    let listed = api.get("/v1/webhooks").await.json();
    let entry = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == webhook["id"])
        .cloned()
        .expect("listed");
    assert_eq!(entry["enabled"], false);
    gone.stop().await;
    control.stop().await;
}

async fn a_hanging_receiver_times_out_without_holding_up_another(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // One attempt within the test: the retry would come 30 s later.
    let api = embedded(&env, &[("WEBHOOK_RETRY_SCHEDULE", "30s")]).await;
    let slow = Receiver::start(&[], Answer::Hang);
    let fast = Receiver::ok();
    let slow_hook = register(&api, json!({"url": slow.url})).await;

    let first = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&first).await;
    let slow_at = slow.wait_for(1, WAIT).await[0].at;
    // While that delivery hangs, another webhook's event comes due.
    let fast_hook = register(&api, json!({"url": fast.url})).await;
    let second = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&second).await;
    let fast_got = fast.wait_for(1, WAIT).await;
    assert!(
        fast_got[0].at < slow_at + Duration::from_millis(1800),
        "the fast receiver waited for the hanging one's 2 s timeout: {:?} after it",
        fast_got[0].at - slow_at
    );
    assert_eq!(fast_got[0].job_id(), second);
    let fast_log = wait_deliveries(&api, str_of(&fast_hook, "id"), 1).await;
    assert_eq!(fast_log[0]["response_status"], 200);

    let log = wait_deliveries(&api, str_of(&slow_hook, "id"), 1).await;
    assert!(
        slow_at.elapsed() >= Duration::from_millis(1900),
        "the hanging attempt was logged before its 2 s timeout"
    );
    let entry = log.last().expect("the first attempt");
    assert_eq!(entry["event_id"], slow.requests()[0].id());
    assert!(entry["response_status"].is_null(), "{entry}");
    assert!(
        entry["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{entry}"
    );
    assert!(
        entry["next_attempt_at"].is_string(),
        "to be retried: {entry}"
    );
    assert_eq!(entry["attempt"], 1);
    // One request per event: a hanging delivery keeps its lease until it
    // times out and is logged, for both events.
    let slow_got = slow.wait_for(2, WAIT).await;
    wait_deliveries(&api, str_of(&slow_hook, "id"), 2).await;
    assert_eq!(slow.count(), 2, "a hanging delivery was sent again");
    assert_ne!(slow_got[0].id(), slow_got[1].id());
    slow.stop().await;
    fast.stop().await;
}

async fn a_redirect_is_not_followed_and_counts_as_a_failure(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[("WEBHOOK_RETRY_SCHEDULE", "30s")]).await;
    let target = Receiver::ok();
    let redirecting = Receiver::start(&[], Answer::Redirect(target.url.clone()));
    let webhook = register(&api, json!({"url": redirecting.url})).await;

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;
    redirecting.wait_for(1, WAIT).await;
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 1).await;
    assert_eq!(log[0]["response_status"], 307, "{}", log[0]);
    assert!(log[0]["next_attempt_at"].is_string(), "retried: {}", log[0]);
    assert_eq!(target.count(), 0, "the redirect was followed");
    redirecting.stop().await;
    target.stop().await;
}

// ------------------------------------------------- which webhooks get what

async fn a_webhook_gets_only_the_event_types_it_asked_for(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let failures = Receiver::ok();
    let everything = Receiver::ok();
    let webhook = register(&api, json!({"url": failures.url, "events": ["job.failed"]})).await;
    assert_eq!(webhook["events"], json!(["job.failed"]));
    register(&api, json!({"url": everything.url})).await;

    let succeeding = submit(&api, json!({"ms": 10})).await;
    let failing = submit(&api, json!({"ms": 10, "fail_times": 1, "permanent": true})).await;
    api.wait_final(&succeeding).await;
    api.wait_final(&failing).await;

    everything.wait_for(2, WAIT).await;
    failures.wait_for(1, WAIT).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = failures.requests();
    assert_eq!(
        received.len(),
        1,
        "the success was not sent to a job.failed webhook"
    );
    assert_eq!(received[0].json()["type"], "job.failed");
    assert_eq!(received[0].job_id(), failing);
    assert_eq!(everything.count(), 2);
    failures.stop().await;
    everything.stop().await;
}

async fn a_per_job_webhook_gets_its_own_jobs_event_even_when_registered_after_it_finished(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let everything = Receiver::ok();
    register(&api, json!({"url": everything.url})).await;
    let finished = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&finished).await;
    everything.wait_for(1, WAIT).await;

    let mine = Receiver::ok();
    let failures_only = Receiver::ok();
    let registered = Instant::now();
    let webhook = register(&api, json!({"url": mine.url, "job_id": finished})).await;
    assert_eq!(webhook["job_id"], finished.as_str());
    let filtered = register(
        &api,
        json!({"url": failures_only.url, "job_id": finished, "events": ["job.failed"]}),
    )
    .await;

    let received = mine.wait_for(1, WAIT).await;
    assert!(
        received[0].at - registered < Duration::from_secs(2),
        "sent at once, not {:?} later",
        received[0].at - registered
    );
    received[0].assert_signed_with(str_of(&webhook, "secret"));
    assert_eq!(received[0].json()["type"], "job.succeeded");
    assert_eq!(received[0].json()["data"], api.job(&finished).await);

    // Another job's event goes to the tenant-wide webhook only.
    let other = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&other).await;
    everything.wait_for(2, WAIT).await;
    settled(&env, &[str_of(&webhook, "id"), str_of(&filtered, "id")]).await;
    assert_eq!(mine.count(), 1, "a per-job webhook got another job's event");
    assert_eq!(
        failures_only.count(),
        0,
        "the event filter applies to a per-job webhook"
    );
    assert!(deliveries(&api, str_of(&filtered, "id")).await.is_empty());
    mine.stop().await;
    failures_only.stop().await;
    everything.stop().await;
}

async fn a_deleted_webhook_gets_nothing_further(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // The retry waits 3 s, so the delete below surely comes before it, even
    // on a busy machine (a delivery already under way when a webhook is
    // deleted may still arrive).
    let api = embedded(&env, &[("WEBHOOK_RETRY_SCHEDULE", "3s")]).await;
    // The first event succeeds; the second fails and would be retried.
    let doomed = Receiver::start(&[Answer::Status(200)], Answer::Status(500));
    let control = Receiver::ok();
    let webhook = register(&api, json!({"url": doomed.url})).await;
    register(&api, json!({"url": control.url})).await;
    let path = format!("/v1/webhooks/{}", str_of(&webhook, "id"));

    let first = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&first).await;
    doomed.wait_for(1, WAIT).await;
    let second = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&second).await;
    doomed.wait_for(2, WAIT).await;
    // Its failure is logged, with a retry due: nothing is in flight.
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 2).await;
    assert!(log[0]["next_attempt_at"].is_string(), "{}", log[0]);

    let reply = api.send(Method::DELETE, &path, None).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    api.get(&path).await.assert_problem(404);
    api.send(Method::DELETE, &path, None)
        .await
        .assert_problem(404);
    api.get(&format!("{path}/deliveries"))
        .await
        .assert_problem(404);
    assert!(
        !list_ids(&api)
            .await
            .contains(&str_of(&webhook, "id").to_owned())
    );

    let third = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&third).await;
    control.wait_for(3, WAIT).await;
    // Its retry went with it, and the later job made it no event: nothing
    // is left that could reach it.
    let left = env
        .count(&format!(
            "SELECT COUNT(*) FROM webhook_events WHERE webhook_id = '{}'",
            str_of(&webhook, "id")
        ))
        .await;
    assert_eq!(left, 0, "a deleted webhook kept a retry or got a new event");
    assert_eq!(
        doomed.count(),
        2,
        "a deleted webhook got a retry or a new event"
    );
    doomed.stop().await;
    control.stop().await;
}

// ----------------------------------------------------- crashes and races

async fn a_delivery_cut_short_by_a_killed_worker_is_made_by_the_next_worker(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let receiver = Receiver::start(&[Answer::Hang], Answer::Status(200));
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let mut first = env.start_worker(&WEBHOOKS);

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;
    let hung = receiver.wait_for(1, WAIT).await[0].clone();
    // Within the 2 s the delivery may hang: it is never logged.
    first.kill_hard();
    let _second = env.start_worker(&WEBHOOKS);

    // The lease (timeout 2 s + 5 s) lapses, then the new worker sends it.
    let received = receiver.wait_for(2, Duration::from_secs(30)).await;
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 1).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    assert_eq!(receiver.count(), 2, "delivered again once, then done");
    let again = &received[1];
    assert_eq!(again.id(), hung.id(), "the same event");
    assert_eq!(again.body, hung.body);
    hung.assert_signed_with(str_of(&webhook, "secret"));
    again.assert_signed_with(str_of(&webhook, "secret"));
    let gap = again.at - hung.at;
    assert!(
        gap >= Duration::from_secs(6),
        "sent again {gap:?} later, inside the 7 s lease of the first try"
    );
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["response_status"], 200);
    assert_eq!(log[0]["event_id"], hung.id());
    assert!(log[0]["next_attempt_at"].is_null());
    receiver.stop().await;
}

async fn two_workers_deliver_each_of_thirty_events_exactly_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let _workers = [env.start_worker(&WEBHOOKS), env.start_worker(&WEBHOOKS)];

    let mut jobs = HashSet::new();
    for i in 0..30 {
        jobs.insert(submit(&api, json!({"ms": (i % 3) * 5})).await);
    }
    for job_id in &jobs {
        assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    }
    receiver.wait_for(30, Duration::from_secs(30)).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = receiver.requests();
    assert_eq!(received.len(), 30, "a request was sent twice");
    let ids: HashSet<&str> = received.iter().map(Received::id).collect();
    assert_eq!(ids.len(), 30, "an event was sent twice");
    let delivered: HashSet<String> = received.iter().map(Received::job_id).collect();
    assert_eq!(delivered, jobs);
    for delivery in &received {
        delivery.assert_signed_with(str_of(&webhook, "secret"));
    }
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 30).await;
    assert_eq!(log.len(), 30, "one logged attempt per event");
    assert!(
        log.iter()
            .all(|d| d["attempt"] == 1 && d["response_status"] == 200),
        "{log:?}"
    );
    receiver.stop().await;
}

async fn a_per_job_webhook_registered_as_its_job_finishes_gets_the_event_exactly_once(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::ok();
    let mut secrets = HashMap::new();
    let mut webhook_ids = Vec::new();
    let mut registered_first = 0;
    for i in 0..20 {
        let job_id = submit(&api, json!({"ms": 0})).await;
        // A job of 0 ms ends some 10 to 40 ms after its submission: the
        // registrations sweep across that moment, one 2 ms step at a time,
        // so some land just before the final status and some just after.
        tokio::time::sleep(Duration::from_millis(i * 2)).await;
        let webhook = register(&api, json!({"url": receiver.url, "job_id": job_id})).await;
        let job = api.wait_final(&job_id).await;
        if time_ms(&webhook["created_at"]) < time_ms(&job["finished_at"]) {
            registered_first += 1;
        }
        secrets.insert(job_id, str_of(&webhook, "secret").to_owned());
        webhook_ids.push(str_of(&webhook, "id").to_owned());
    }
    eprintln!("{registered_first} of 20 webhooks were registered before their job's end");
    receiver.wait_for(20, Duration::from_secs(30)).await;
    let webhook_ids: Vec<&str> = webhook_ids.iter().map(String::as_str).collect();
    settled(&env, &webhook_ids).await;
    let received = receiver.requests();
    assert_eq!(received.len(), 20, "one delivery per job");
    let mut seen = HashSet::new();
    for delivery in &received {
        let job_id = delivery.job_id();
        let secret = secrets
            .get(&job_id)
            .unwrap_or_else(|| panic!("an event of a job without webhook: {job_id}"));
        delivery.assert_signed_with(secret);
        assert!(seen.insert(job_id.clone()), "{job_id}'s event came twice");
    }
    receiver.stop().await;
}

// ------------------------------------------------------------------ SSRF

async fn private_and_non_http_urls_are_refused_and_nothing_is_stored(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // WEBHOOK_ALLOW_PRIVATE is not set: the default, false.
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    for url in [
        "http://127.0.0.1/x",
        "http://[::1]/x",
        "http://10.0.0.1/x",
        "http://169.254.169.254/latest",
        "http://localhost/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://2130706433/x",
        "http://0x7f.1/x",
        "http://0.0.0.0/x",
        "http://192.168.1.1/x",
        "http://[fd00::1]/x",
        "ftp://example.com",
        "not a url",
    ] {
        let reply = api.post("/v1/webhooks", &json!({"url": url})).await;
        let fields = problem_fields(&reply, 422);
        assert!(fields.iter().any(|f| f == "url"), "{url}: {}", reply.text);
    }
    assert!(
        list_ids(&api).await.is_empty(),
        "a refused webhook was stored"
    );

    // A public address is accepted by the same check.
    let public = register(&api, json!({"url": "https://93.184.216.34/hook"})).await;
    assert_eq!(list_ids(&api).await, [str_of(&public, "id")]);
}

async fn a_private_url_is_refused_again_at_delivery(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // Allowed at registration, not where the dispatcher runs.
    let api = api_alone(&env).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let _worker = env.start_worker(&[("WEBHOOK_RETRY_SCHEDULE", "30s")]);

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 1).await;
    let entry = &log[0];
    assert!(entry["response_status"].is_null(), "{entry}");
    assert!(
        entry["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a public address")),
        "{entry}"
    );
    assert_eq!(receiver.count(), 0, "sent to a private address");
    receiver.stop().await;
}

async fn a_worker_with_proxy_settings_still_delivers_straight_to_the_checked_address(
    backend: Backend,
) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    // A proxy nothing listens on: a client that honoured these settings
    // could not deliver at all.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let proxy = format!("http://{}", dead.local_addr().expect("its address"));
    drop(dead);
    let mut extra = WEBHOOKS.to_vec();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        extra.push((name, &proxy));
    }
    let _worker = env.start_worker(&extra);

    let job_id = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job_id).await;

    let received = receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].job_id(), job_id);
    let log = wait_deliveries(&api, str_of(&webhook, "id"), 1).await;
    assert_eq!(log[0]["response_status"], 200, "{}", log[0]);
    receiver.stop().await;
}

// ------------------------------------------------------------- contract

async fn registering_answers_201_with_the_secret_shown_only_there(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let url = "http://127.0.0.1:9/hooks/a";

    let reply = api.post("/v1/webhooks", &json!({"url": url})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let created = reply.json();
    let id = str_of(&created, "id");
    assert!(id.starts_with("wh_"), "{id}");
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/webhooks/{id}").as_str())
    );
    assert_eq!(created["url"], url);
    assert_eq!(created["events"], json!(ALL_EVENTS), "all three by default");
    assert!(created["job_id"].is_null());
    assert_eq!(created["enabled"], true);
    let secret = str_of(&created, "secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(
        standardwebhooks::Webhook::new(secret).is_ok(),
        "the secret is whsec_ + base64"
    );
    let created_at = time_ms(&created["created_at"]);
    assert!((created_at / 1000 - unix_now()).abs() <= 5);

    let read = api.get(&format!("/v1/webhooks/{id}")).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    let mut expected = created.clone();
    expected.as_object_mut().unwrap().remove("secret");
    assert_eq!(
        read.json(),
        expected,
        "the same webhook, without its secret"
    );

    // Two more, then page through all three one at a time.
    let job_id = submit(&api, json!({"ms": 1})).await;
    let second = register(
        &api,
        json!({"url": url, "events": ["job.failed", "job.succeeded"], "job_id": job_id}),
    )
    .await;
    assert_eq!(second["job_id"], job_id.as_str());
    let events: BTreeSet<&str> = second["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events, BTreeSet::from(["job.failed", "job.succeeded"]));
    let third = register(&api, json!({"url": url, "events": ["job.cancelled"]})).await;
    assert_ne!(
        second["secret"], created["secret"],
        "each webhook has its own secret"
    );

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/webhooks?limit=1&cursor={c}"),
            None => "/v1/webhooks?limit=1".to_owned(),
        };
        let reply = api.get(&path).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let page = reply.json();
        pages += 1;
        let data = page["data"].as_array().unwrap();
        assert_eq!(data.len(), 1, "{page}");
        for webhook in data {
            assert!(
                webhook.get("secret").is_none(),
                "a listed secret: {webhook}"
            );
            seen.push(str_of(webhook, "id").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 10, "the cursors do not end");
    }
    assert_eq!(
        seen,
        [str_of(&third, "id"), str_of(&second, "id"), id],
        "every webhook once, newest first"
    );
    assert_eq!(pages, 3);
    api.get("/v1/webhooks?limit=0").await.assert_problem(422);
    api.get("/v1/webhooks?cursor=nonsense")
        .await
        .assert_problem(422);
}

async fn bad_registrations_are_refused_and_store_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let url = "http://127.0.0.1:9/hooks/a";

    let reply = api
        .post(
            "/v1/webhooks",
            &json!({"url": url, "events": ["job.finished"]}),
        )
        .await;
    let fields = problem_fields(&reply, 422);
    assert!(
        fields.iter().any(|f| f.starts_with("events")),
        "{}",
        reply.text
    );
    let reply = api
        .post("/v1/webhooks", &json!({"url": url, "events": []}))
        .await;
    let fields = problem_fields(&reply, 422);
    assert!(
        fields.iter().any(|f| f.starts_with("events")),
        "{}",
        reply.text
    );

    api.post("/v1/webhooks", &json!({"url": url, "secret": "mine"}))
        .await
        .assert_problem(400);
    api.post("/v1/webhooks", &json!({"url": 17}))
        .await
        .assert_problem(400);

    let other_tenants = str_of(
        &api.as_tenant_b().submit("sleep", json!({"ms": 1})).await,
        "job_id",
    )
    .to_owned();
    for job_id in [
        "job_0193c4d2a1b27c3d8e9f0a1b2c3d4e5f",
        "nonsense",
        other_tenants.as_str(),
    ] {
        api.post("/v1/webhooks", &json!({"url": url, "job_id": job_id}))
            .await
            .assert_problem(404);
    }
    assert!(
        list_ids(&api).await.is_empty(),
        "a refused webhook was stored"
    );
}

async fn another_tenants_webhook_is_not_found(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let other = api.as_tenant_b();
    let webhook = register(&api, json!({"url": "http://127.0.0.1:9/hooks/a"})).await;
    let path = format!("/v1/webhooks/{}", str_of(&webhook, "id"));

    other.get(&path).await.assert_problem(404);
    other
        .get(&format!("{path}/deliveries"))
        .await
        .assert_problem(404);
    other
        .send(Method::DELETE, &path, None)
        .await
        .assert_problem(404);
    assert!(list_ids(&other).await.is_empty());
    let still = api.get(&path).await;
    assert_eq!(
        still.status,
        StatusCode::OK,
        "tenant b deleted it: {}",
        still.text
    );
    assert_eq!(list_ids(&api).await, [str_of(&webhook, "id")]);
}

async fn an_idempotency_key_registers_one_webhook_and_replays_it(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let body = json!({"url": "http://127.0.0.1:9/hooks/a"});

    let first = post_with_key(&api, "hook-1", &body).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let again = post_with_key(&api, "hook-1", &body).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(again.json()["secret"], first.json()["secret"]);
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(list_ids(&api).await.len(), 1, "one webhook");

    let other = post_with_key(&api, "hook-2", &body).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert_ne!(other.json()["id"], first.json()["id"]);
    assert_eq!(list_ids(&api).await.len(), 2);

    // No answer is stored with its secret: a replay shows the secret as it
    // is now, after a rotation the new one, to a replay of either request.
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let rotated = post_action(&api, &id, "rotate-secret", Some("rotate-1")).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
    let new_secret = rotated.json()["secret"].clone();
    assert!(new_secret.is_string() && new_secret != first.json()["secret"]);
    let replayed = post_action(&api, &id, "rotate-secret", Some("rotate-1")).await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.json()["secret"], new_secret);
    let registration = post_with_key(&api, "hook-1", &body).await;
    assert_eq!(registration.header("idempotent-replayed"), Some("true"));
    assert_eq!(registration.json()["secret"], new_secret);
}

// ------------------------------------------------- enable, rotate-secret

async fn post_action(api: &Api, webhook_id: &str, action: &str, key: Option<&str>) -> Reply {
    let mut request = api
        .client
        .request(
            Method::POST,
            api.url(&format!("/v1/webhooks/{webhook_id}/{action}")),
        )
        .bearer_auth(&api.key);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    Api::read(request).await
}

async fn a_disabled_webhook_enabled_again_gets_the_events_of_later_jobs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::start(&[Answer::Status(410)], Answer::Status(200));
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let id = str_of(&webhook, "id");
    let path = format!("/v1/webhooks/{id}");

    let first = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&first).await;
    receiver.wait_for(1, WAIT).await;
    wait_disabled(&api, id).await;

    let reply = post_action(&api, id, "enable", Some("enable-1")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let enabled = reply.json();
    assert_eq!(enabled["enabled"], true);
    assert_eq!(enabled["id"], id);
    assert!(enabled.get("secret").is_none(), "no secret: {enabled}");
    assert_eq!(api.get(&path).await.json()["enabled"], true);
    let again = post_action(&api, id, "enable", None).await;
    assert_eq!(again.status, StatusCode::OK, "enabling an enabled webhook");

    let second = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&second).await;
    let received = receiver.wait_for(2, WAIT).await;
    assert_eq!(received[1].job_id(), second, "the later job's event");
    settled(&env, &[id]).await;
    assert_eq!(
        receiver.count(),
        2,
        "the event dropped while disabled stays dropped"
    );
    receiver.stop().await;
}

async fn a_rotated_secret_is_shown_once_and_signs_the_next_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = embedded(&env, &[]).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let id = str_of(&webhook, "id");
    let old_secret = str_of(&webhook, "secret");

    let reply = post_action(&api, id, "rotate-secret", Some("rotate-1")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let rotated = reply.json();
    let new_secret = str_of(&rotated, "secret");
    assert!(new_secret.starts_with("whsec_"), "{new_secret}");
    assert_ne!(new_secret, old_secret);
    assert_eq!(rotated["id"], id);
    let read = api.get(&format!("/v1/webhooks/{id}")).await.json();
    assert!(read.get("secret").is_none(), "shown only once: {read}");
    let replay = post_action(&api, id, "rotate-secret", Some("rotate-1")).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replay.json()["secret"],
        new_secret,
        "a replay rotates nothing"
    );

    let job = submit(&api, json!({"ms": 10})).await;
    api.wait_final(&job).await;
    let received = receiver.wait_for(1, WAIT).await;
    received[0].assert_signed_with(new_secret);
    assert!(
        received[0].verify(old_secret).is_err(),
        "the old secret signs no more"
    );
    receiver.stop().await;
}

async fn enabling_or_rotating_another_tenants_webhook_is_not_found(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = api_alone(&env).await;
    let webhook = register(&api, json!({"url": "http://127.0.0.1:9/hooks/a"})).await;
    let id = str_of(&webhook, "id");
    let other = api.as_tenant_b();
    for action in ["enable", "rotate-secret"] {
        post_action(&other, id, action, None)
            .await
            .assert_problem(404);
        post_action(&api, "wh_0000000000000000000000000000000a", action, None)
            .await
            .assert_problem(404);
        post_action(&api, "nope", action, None)
            .await
            .assert_problem(404);
    }
    let rotated = post_action(&api, id, "rotate-secret", None).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
}

/// A worker whose clock is 10 minutes ahead (`testkit::clock`) signs
/// with the database's time: its deliveries pass the Standard Webhooks
/// check, which refuses a timestamp more than 5 minutes off the
/// receiver's clock.
async fn a_worker_ten_minutes_ahead_signs_timestamps_that_verify(env: TestEnv) {
    let api = api_alone(&env).await;
    let receiver = Receiver::ok();
    let webhook = register(&api, json!({"url": receiver.url})).await;
    let mut settings = testkit::clock::skewed_by(600);
    settings.extend(
        WEBHOOKS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let _worker = env.start_worker_owned(&settings);

    let before = unix_now();
    let jobs = [
        submit(&api, json!({"ms": 10})).await,
        submit(&api, json!({"ms": 10})).await,
    ];
    for job_id in &jobs {
        assert_eq!(api.wait_final(job_id).await["status"], "SUCCEEDED");
    }
    receiver.wait_for(jobs.len(), WAIT).await;
    settled(&env, &[str_of(&webhook, "id")]).await;
    let received = receiver.requests();
    assert_eq!(received.len(), jobs.len(), "one delivery per job");
    for delivery in &received {
        delivery.assert_signed_with(str_of(&webhook, "secret"));
        let timestamp = delivery.timestamp();
        assert!(
            (before - 1..=unix_now() + 1).contains(&timestamp),
            "webhook-timestamp {timestamp} is the database's time of the attempt"
        );
    }
    receiver.stop().await;
}

crate::on_both_production_queues!(a_worker_ten_minutes_ahead_signs_timestamps_that_verify);

crate::on_both_backends!(
    a_finished_job_is_delivered_once_signed_and_carrying_the_job_object,
    failed_and_cancelled_jobs_announce_job_failed_and_job_cancelled,
    a_receiver_failing_twice_gets_a_third_attempt_of_the_same_event,
    a_receiver_that_always_fails_gets_one_attempt_more_than_the_schedule_has_delays,
    a_receiver_answering_410_disables_its_webhook,
    a_hanging_receiver_times_out_without_holding_up_another,
    a_redirect_is_not_followed_and_counts_as_a_failure,
    a_webhook_gets_only_the_event_types_it_asked_for,
    a_per_job_webhook_gets_its_own_jobs_event_even_when_registered_after_it_finished,
    a_deleted_webhook_gets_nothing_further,
    a_delivery_cut_short_by_a_killed_worker_is_made_by_the_next_worker,
    two_workers_deliver_each_of_thirty_events_exactly_once,
    a_per_job_webhook_registered_as_its_job_finishes_gets_the_event_exactly_once,
    private_and_non_http_urls_are_refused_and_nothing_is_stored,
    a_private_url_is_refused_again_at_delivery,
    a_worker_with_proxy_settings_still_delivers_straight_to_the_checked_address,
    registering_answers_201_with_the_secret_shown_only_there,
    bad_registrations_are_refused_and_store_nothing,
    another_tenants_webhook_is_not_found,
    an_idempotency_key_registers_one_webhook_and_replays_it,
    a_disabled_webhook_enabled_again_gets_the_events_of_later_jobs,
    a_rotated_secret_is_shown_once_and_signs_the_next_deliveries,
    enabling_or_rotating_another_tenants_webhook_is_not_found,
);

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(
    a_finished_job_is_delivered_once_signed_and_carrying_the_job_object,
    a_receiver_failing_twice_gets_a_third_attempt_of_the_same_event,
    two_workers_deliver_each_of_thirty_events_exactly_once,
);
