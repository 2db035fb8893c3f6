//! Which answers the client tries again and which it does not, against a
//! server on loopback that answers from a script: a retry only where the
//! same request can succeed, always under the intent's one key, no sooner
//! than `Retry-After`, and never past the call's deadline or its tries;
//! and what the hook of every try is told.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use actix_web::{HttpRequest, HttpResponse, web};
use receipt_client::{Client, ClientBuilder, Error, RetryPolicy, Sleep};
use serde_json::json;
use testkit::serve_on_loopback;

/// An answer of the script: status, `Retry-After`, body.
type Scripted = (u16, Option<&'static str>, serde_json::Value);

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Scripted>>,
    /// Each request's `Idempotency-Key`, in order.
    keys: Mutex<Vec<Option<String>>>,
}

async fn answer(script: web::Data<Script>, request: HttpRequest) -> HttpResponse {
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    script.keys.lock().unwrap().push(key);
    let next = script.answers.lock().unwrap().pop_front();
    // The last answer stands once the script runs out.
    let (status, retry_after, body) = match next {
        Some(answer) => {
            if script.answers.lock().unwrap().is_empty() {
                script.answers.lock().unwrap().push_back(answer.clone());
            }
            answer
        }
        None => (500, None, json!({})),
    };
    let mut response = HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap());
    if let Some(seconds) = retry_after {
        response.insert_header(("retry-after", seconds));
    }
    let content_type = if status >= 400 {
        "application/problem+json"
    } else {
        "application/json"
    };
    response.content_type(content_type).body(body.to_string())
}

fn problem(status: u16, detail: &str) -> serde_json::Value {
    json!({"type": "/problems/x", "title": "T", "status": status, "detail": detail})
}

fn job() -> serde_json::Value {
    json!({"job_id": "job_1", "kind": "sleep", "params": {}, "status": "QUEUED", "attempts": 0,
           "created_at": "2026-10-03T09:15:00.123Z", "cancel_requested": false, "priority": "normal"})
}

/// Quick tries within `deadline`.
fn quick(deadline: Duration) -> RetryPolicy {
    RetryPolicy {
        deadline,
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        try_timeout: Duration::from_secs(5),
        max_tries: None,
    }
}

/// A client of a server answering `answers` in turn, and the script.
fn scripted(answers: Vec<Scripted>, deadline: Duration) -> (Client, web::Data<Script>) {
    scripted_with(answers, |builder| builder.retry(quick(deadline)))
}

/// [`scripted`], with the client's builder finished by `settings`.
fn scripted_with(
    answers: Vec<Scripted>,
    settings: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> (Client, web::Data<Script>) {
    let script = web::Data::new(Script::default());
    script.answers.lock().unwrap().extend(answers);
    let (addr, _handle) = serve_on_loopback(script.clone(), answer);
    let client = settings(Client::builder(&format!("http://{addr}"), "key"))
        .build()
        .expect("client");
    (client, script)
}

/// What the hook was told of one try: its number, the status of its
/// failure (0: no answer; `None`: it succeeded), whether another followed.
type Told = (u32, Option<u16>, bool);

/// A hook that keeps what it is told, and what it keeps.
fn recorder() -> (
    impl Fn(&receipt_client::TryReport<'_>) + Send + Sync + 'static,
    Arc<Mutex<Vec<Told>>>,
) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let kept = told.clone();
    let hook = move |report: &receipt_client::TryReport<'_>| {
        assert!(report.url.path().starts_with("/v1/"), "{}", report.url);
        let status = report.error.map(|e| e.status().unwrap_or(0));
        kept.lock()
            .unwrap()
            .push((report.number, status, report.next_try_in.is_some()));
    };
    (hook, told)
}

fn keys(script: &Script) -> Vec<Option<String>> {
    script.keys.lock().unwrap().clone()
}

#[actix_web::test]
async fn a_refusal_that_needs_another_request_is_not_tried_again() {
    let mut invalid = problem(422, "the parameters are not valid");
    invalid["errors"] = json!([{"field": "ms", "message": "must be at most 600000"}]);
    for answer in [
        (422, None, invalid),
        (409, None, problem(409, "job job_1 is SUCCEEDED")),
        (404, None, problem(404, "there is no job job_1")),
        (400, None, problem(400, "unknown field")),
    ] {
        let status = answer.0;
        let (client, script) = scripted(vec![answer], Duration::from_secs(30));

        let error = client.submit(Sleep::default()).await.unwrap_err();

        assert_eq!(error.status(), Some(status), "{error}");
        assert_eq!(keys(&script).len(), 1, "a {status} was sent again");
        if status == 422 {
            assert_eq!(error.field_errors()[0].field, "ms");
        }
    }
}

#[actix_web::test]
async fn answers_a_retry_can_change_are_tried_again_under_the_same_key() {
    for first in [
        (503, Some("1"), problem(503, "the database is unavailable")),
        (429, Some("1"), problem(429, "over RATE_LIMIT")),
        (
            409,
            Some("1"),
            problem(409, "the Idempotency-Key is being processed"),
        ),
        (500, None, problem(500, "an unexpected error occurred")),
    ] {
        let (status, retry_after) = (first.0, first.1);
        let (client, script) = scripted(vec![first, (202, None, job())], Duration::from_secs(30));
        let started = Instant::now();

        let job = client.submit(Sleep::default()).await.expect("the job");

        let sent = keys(&script);
        assert_eq!(job.job_id, "job_1");
        assert_eq!(sent.len(), 2, "after a {status}");
        assert!(sent[0].is_some() && sent[0] == sent[1], "keys {sent:?}");
        if retry_after.is_some() {
            assert!(
                started.elapsed() >= Duration::from_secs(1),
                "a {status}'s Retry-After was not waited for"
            );
        }
    }
}

#[actix_web::test]
async fn each_intent_has_its_own_key_unless_the_caller_names_one() {
    let (client, script) = scripted(vec![(202, None, job())], Duration::from_secs(30));

    client.submit(Sleep::default()).await.expect("first");
    client.submit(Sleep::default()).await.expect("second");
    let named = client.with_idempotency_key("order-1234");
    named.cancel("job_1").await.expect("cancel");
    named.cancel("job_1").await.expect("cancel again");

    let sent = keys(&script);
    assert_ne!(sent[0], sent[1], "two intents shared a key");
    assert_eq!(sent[2].as_deref(), Some("order-1234"));
    assert_eq!(sent[3].as_deref(), Some("order-1234"));
}

#[actix_web::test]
async fn tries_stop_at_the_deadline_with_the_last_answer() {
    let (client, script) = scripted(
        vec![(503, None, problem(503, "the database is unavailable"))],
        Duration::from_millis(600),
    );
    let started = Instant::now();

    let error = client.job("job_1").await.unwrap_err();

    assert!(matches!(error, Error::Api { .. }), "{error}");
    assert_eq!(error.status(), Some(503));
    assert!(keys(&script).len() >= 2, "tried once only");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[actix_web::test]
async fn a_policy_of_one_try_sends_each_request_once_and_answers_its_failure() {
    let (client, script) = scripted_with(
        vec![
            (503, Some("1"), problem(503, "the database is unavailable")),
            (202, None, job()),
        ],
        |builder| builder.retry(RetryPolicy::single_try()),
    );
    let started = Instant::now();

    let error = client.submit(Sleep::default()).await.unwrap_err();

    assert_eq!(error.status(), Some(503), "{error}");
    assert!(
        matches!(error, Error::Api { retry_after: Some(after), .. } if after == Duration::from_secs(1)),
        "{error:?}"
    );
    assert_eq!(keys(&script).len(), 1, "the 503 was tried again");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the one try waited for its Retry-After"
    );
    let job = client.submit(Sleep::default()).await.expect("the next try");
    assert_eq!(job.job_id, "job_1");
}

#[actix_web::test]
async fn the_hook_is_told_of_every_try_and_whether_another_follows() {
    let (hook, told) = recorder();
    let (client, _script) = scripted_with(
        vec![
            (503, None, problem(503, "the database is unavailable")),
            (500, None, problem(500, "an unexpected error occurred")),
            (202, None, job()),
        ],
        |builder| builder.retry(quick(Duration::from_secs(30))).on_try(hook),
    );

    client.submit(Sleep::default()).await.expect("the job");

    assert_eq!(
        *told.lock().unwrap(),
        vec![(1, Some(503), true), (2, Some(500), true), (3, None, false)]
    );
}

#[actix_web::test]
async fn the_hook_is_told_of_a_last_try_as_the_end_of_its_call() {
    for (policy, answers, expected) in [
        (
            quick(Duration::from_secs(30)),
            vec![(422, None, problem(422, "the parameters are not valid"))],
            vec![(1, Some(422), false)],
        ),
        (
            RetryPolicy {
                max_tries: Some(2),
                ..quick(Duration::from_secs(30))
            },
            vec![(429, None, problem(429, "over RATE_LIMIT"))],
            vec![(1, Some(429), true), (2, Some(429), false)],
        ),
    ] {
        let (hook, told) = recorder();
        let (client, script) = scripted_with(answers, |builder| builder.retry(policy).on_try(hook));

        client.submit(Sleep::default()).await.unwrap_err();

        assert_eq!(*told.lock().unwrap(), expected);
        assert_eq!(keys(&script).len(), expected.len());
    }
}

#[actix_web::test]
async fn calls_run_on_tasks_of_their_own() {
    let (client, script) = scripted(
        vec![
            (503, None, problem(503, "the database is unavailable")),
            (202, None, job()),
        ],
        Duration::from_secs(30),
    );

    // A program with many clients at once spawns each call: its future
    // must be `Send`, pauses between tries included.
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let job = client.submit(Sleep::default()).await?;
                client.job(&job.job_id).await
            })
        })
        .collect();
    for call in calls {
        let job = call.await.expect("the task").expect("the job");
        assert_eq!(job.job_id, "job_1");
    }
    assert_eq!(keys(&script).len(), 9, "one 503, four submits, four reads");
}

/// A wait answered at once by a server (as a job that moves along is)
/// still asks for a long poll of at least a second every time: a part of a
/// second left, or a shorter `every`, is rounded up, never sent as a poll
/// without `wait` that the service answers at once, again and again.
#[actix_web::test]
async fn every_poll_of_a_wait_asks_the_service_to_hold_it() {
    let urls = Arc::new(Mutex::new(Vec::new()));
    let kept = urls.clone();
    let hook = move |report: &receipt_client::TryReport<'_>| {
        kept.lock().unwrap().push(report.url.clone());
    };
    let (client, _script) = scripted_with(vec![(200, None, job())], |builder| {
        builder.retry(quick(Duration::from_secs(30))).on_try(hook)
    });
    let error = client
        .wait_watching(
            "job_1",
            Duration::from_millis(1_500),
            Duration::from_millis(300),
            |_| {},
        )
        .await
        .expect_err("the job never ends");
    assert!(matches!(error, Error::WaitTimedOut(_)), "{error}");
    let urls = urls.lock().unwrap().clone();
    assert!(!urls.is_empty());
    for url in &urls {
        let wait = url
            .query_pairs()
            .find(|(name, _)| name == "wait")
            .and_then(|(_, value)| value.parse::<u64>().ok());
        assert!(wait.is_some_and(|seconds| seconds >= 1), "{url}");
    }
}
