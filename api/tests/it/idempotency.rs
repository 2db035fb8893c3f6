//! The Idempotency section of `docs/api.md`: a retried POST does its work once.

use std::collections::HashSet;

use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use shared::{ids::new_job_id, time::now_ms};
use store::{KeyLookup, NewJob, Store, StoredResponse, Submission, SubmissionKey, Submitted};

use crate::common::{Api, Backend, Reply, StoreOf, TestEnv, wait, wait_for_a_blocked_statement};

async fn post_with_key(api: &Api, path: &str, key: &str, body: &str) -> Reply {
    Api::read(
        api.client
            .request(Method::POST, api.url(path))
            .bearer_auth(&api.key)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body.to_owned()),
    )
    .await
}

async fn job_count(api: &Api) -> usize {
    api.get("/v1/jobs?limit=200").await.json()["data"]
        .as_array()
        .unwrap()
        .len()
}

async fn the_same_key_twice_makes_one_job_and_replays_the_answer_byte_for_byte(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;

    let first = post_with_key(&api, "/v1/reports/sleep", "order-17", r#"{"ms": 5}"#).await;
    let second = post_with_key(&api, "/v1/reports/sleep", "order-17", r#"{"ms": 5}"#).await;

    assert_eq!(first.status, StatusCode::ACCEPTED);
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(second.status, StatusCode::ACCEPTED);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        second.text, first.text,
        "the body is replayed byte for byte"
    );
    assert_eq!(second.header("location"), first.header("location"));
    assert_eq!(second.header("content-type"), Some("application/json"));
    assert_eq!(job_count(&api).await, 1);

    // Quoted as a structured-field string, it is the same key.
    let quoted = post_with_key(&api, "/v1/reports/sleep", "\"order-17\"", r#"{"ms": 5}"#).await;
    assert_eq!(quoted.text, first.text);
    assert_eq!(job_count(&api).await, 1);
}

async fn a_reordered_body_replays_and_a_changed_one_is_refused(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let first = post_with_key(
        &api,
        "/v1/reports/sleep",
        "k1",
        r#"{"ms": 5, "fail_times": 1}"#,
    )
    .await;
    assert_eq!(first.status, StatusCode::ACCEPTED);

    let reordered = post_with_key(
        &api,
        "/v1/reports/sleep",
        "k1",
        "{ \"fail_times\" : 1,\n \"ms\" : 5 }",
    )
    .await;
    assert_eq!(reordered.header("idempotent-replayed"), Some("true"));
    assert_eq!(reordered.text, first.text);

    let changed = post_with_key(
        &api,
        "/v1/reports/sleep",
        "k1",
        r#"{"ms": 6, "fail_times": 1}"#,
    )
    .await;
    let problem = changed.assert_problem(422);
    assert!(
        problem["detail"].as_str().unwrap().contains("k1"),
        "names the key: {problem}"
    );

    let other_path = post_with_key(
        &api,
        "/v1/reports/gst-summary",
        "k1",
        r#"{"month": "2026-10"}"#,
    )
    .await;
    other_path.assert_problem(422);
    assert_eq!(job_count(&api).await, 1);
}

async fn bad_keys_are_refused_with_400_and_change_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let too_long = "k".repeat(256);
    for key in [
        "",
        "has space",
        "\"\"",
        "\"unterminated",
        too_long.as_str(),
        "tab\tin",
    ] {
        let reply = post_with_key(&api, "/v1/reports/sleep", key, r#"{"ms": 5}"#).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "key {key:?}: {}",
            reply.text
        );
        reply.assert_problem(400);
    }
    let non_ascii = Api::read(
        api.client
            .post(api.url("/v1/reports/sleep"))
            .bearer_auth(&api.key)
            .header("content-type", "application/json")
            .header(
                "idempotency-key",
                reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
            )
            .body(r#"{"ms": 5}"#),
    )
    .await;
    non_ascii.assert_problem(400);
    let longest = "k".repeat(255);
    let reply = post_with_key(&api, "/v1/reports/sleep", &longest, r#"{"ms": 5}"#).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert_eq!(job_count(&api).await, 1);
}

async fn fifty_concurrent_requests_with_one_key_do_the_work_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let entries = json!({"entries": [
        {"id": "c-1", "date": "2026-10-01", "direction": "sale", "amount": "100.00", "gst_rate": "18"},
        {"id": "c-2", "date": "2026-10-02", "direction": "purchase", "amount": "50.00", "gst_rate": "5"}
    ]})
    .to_string();
    for (path, key, body) in [
        (
            "/v1/reports/sleep",
            "burst-submit",
            r#"{"ms": 1}"#.to_owned(),
        ),
        ("/v1/ledger/entries", "burst-import", entries),
    ] {
        let replies =
            futures::future::join_all((0..50).map(|_| post_with_key(&api, path, key, &body))).await;
        let originals: Vec<&Reply> = replies
            .iter()
            .filter(|r| r.status.is_success() && r.header("idempotent-replayed").is_none())
            .collect();
        assert_eq!(originals.len(), 1, "exactly one request ran for {path}");
        for reply in &replies {
            assert!(
                !reply.status.is_server_error(),
                "{path}: {} {}",
                reply.status,
                reply.text
            );
            if reply.status == StatusCode::CONFLICT {
                reply.assert_problem(409);
                // What tells a client that the same request may be sent again.
                assert_eq!(reply.header("retry-after"), Some("1"), "{path}");
            } else {
                assert_eq!(
                    reply.text, originals[0].text,
                    "{path}: every other answer is the replay"
                );
            }
        }
    }
    assert_eq!(job_count(&api).await, 1);
    let import = api.import(json!([
        {"id": "c-1", "date": "2026-10-01", "direction": "sale", "amount": "100.00", "gst_rate": "18"},
        {"id": "c-2", "date": "2026-10-02", "direction": "purchase", "amount": "50.00", "gst_rate": "5"}
    ]))
    .await;
    assert_eq!(
        import.json(),
        json!({"inserted": 0, "skipped": 2}),
        "the burst stored each entry once"
    );
}

async fn the_same_key_in_two_tenants_is_two_keys(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let other = api.as_tenant_b();
    let a = post_with_key(&api, "/v1/reports/sleep", "shared", r#"{"ms": 5}"#).await;
    let b = post_with_key(&other, "/v1/reports/sleep", "shared", r#"{"ms": 5}"#).await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    assert_eq!(b.status, StatusCode::ACCEPTED);
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_ne!(a.json()["job_id"], b.json()["job_id"]);
    assert_eq!(job_count(&api).await, 1);
    assert_eq!(job_count(&other).await, 1);
}

async fn a_refused_request_stores_nothing_so_the_corrected_one_runs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let bad = post_with_key(
        &api,
        "/v1/reports/gst-summary",
        "fix-me",
        r#"{"month": "2026-13"}"#,
    )
    .await;
    bad.assert_problem(422);
    let malformed = post_with_key(&api, "/v1/reports/gst-summary", "fix-me", r#"{"month": "#).await;
    malformed.assert_problem(400);
    let good = post_with_key(
        &api,
        "/v1/reports/gst-summary",
        "fix-me",
        r#"{"month": "2026-10"}"#,
    )
    .await;
    assert_eq!(good.status, StatusCode::ACCEPTED, "{}", good.text);
    assert_eq!(good.header("idempotent-replayed"), None);
    assert_eq!(job_count(&api).await, 1);
}

async fn a_request_that_ends_in_a_5xx_stores_nothing_and_its_retry_runs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    // A trigger makes the job insert fail inside the request's transaction.
    let (create, drop) = match backend {
        Backend::Sqlite => (
            "CREATE TRIGGER break_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'broken on purpose'); END;",
            "DROP TRIGGER break_jobs;",
        ),
        Backend::PgRedis => (
            "CREATE FUNCTION break_jobs() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'broken on purpose'; END $$;
             CREATE TRIGGER break_jobs BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION break_jobs();",
            "DROP TRIGGER break_jobs ON jobs; DROP FUNCTION break_jobs();",
        ),
    };
    env.execute_sql(create).await;
    let failed = post_with_key(&api, "/v1/reports/sleep", "retry-me", r#"{"ms": 5}"#).await;
    failed.assert_problem(500);
    assert!(
        !failed.text.contains("broken on purpose"),
        "a 500 sends nothing of its cause"
    );
    env.execute_sql(drop).await;

    let retried = post_with_key(&api, "/v1/reports/sleep", "retry-me", r#"{"ms": 5}"#).await;
    assert_eq!(retried.status, StatusCode::ACCEPTED, "{}", retried.text);
    assert_eq!(retried.header("idempotent-replayed"), None, "the retry ran");
    assert_eq!(job_count(&api).await, 1);
}

async fn an_expired_key_is_new_again(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("IDEMPOTENCY_TTL", "1s")])
        .await;
    let first = post_with_key(&api, "/v1/reports/sleep", "short-lived", r#"{"ms": 5}"#).await;
    let replay = post_with_key(&api, "/v1/reports/sleep", "short-lived", r#"{"ms": 5}"#).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    // Sent again, as a client would, until the key has expired: a replay
    // until then, and then a new job.
    let after = wait::until_ok(
        "the key expired",
        std::time::Duration::from_secs(10),
        async || {
            let reply =
                post_with_key(&api, "/v1/reports/sleep", "short-lived", r#"{"ms": 5}"#).await;
            match reply.header("idempotent-replayed") {
                None => Ok(reply),
                Some(_) => Err(reply.status),
            }
        },
    )
    .await;
    assert_eq!(after.status, StatusCode::ACCEPTED);
    assert_eq!(after.header("idempotent-replayed"), None);
    assert_ne!(after.json()["job_id"], first.json()["job_id"]);
    assert_eq!(job_count(&api).await, 2);
}

async fn a_cancel_with_a_key_is_replayed(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let job = api.submit("sleep", json!({"ms": 5})).await;
    let path = format!("/v1/jobs/{}/cancel", job["job_id"].as_str().unwrap());
    let first = post_with_key(&api, &path, "stop-it", "").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.json()["status"], "CANCELLED");
    let again = post_with_key(&api, &path, "stop-it", "").await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text, first.text);
}

/// Many clients, a lossy network: a share of the replies is "lost" (the
/// client does not read it, as after a timeout) and the client retries with
/// the same key until it gets an answer. Every intent is done exactly once.
async fn a_lossy_network_with_retries_does_each_intent_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    const CLIENTS: u64 = 8;
    const INTENTS_PER_CLIENT: usize = 12;
    let results = futures::future::join_all((0..CLIENTS).map(|client| {
        let api = &api;
        async move {
            let mut rng = StdRng::seed_from_u64(0x5eed + client);
            let mut entry_ids = Vec::new();
            for intent in 0..INTENTS_PER_CLIENT {
                let key = format!("client-{client}-intent-{intent}");
                let (path, body) = if intent % 3 == 0 {
                    let id = format!("e-{client}-{intent}");
                    entry_ids.push(id.clone());
                    let body = json!({"entries": [{"id": id, "date": "2026-10-09",
                        "direction": "sale", "amount": format!("{}.00", intent + 1), "gst_rate": "12"}]});
                    ("/v1/ledger/entries", body.to_string())
                } else {
                    ("/v1/reports/sleep", json!({"ms": intent}).to_string())
                };
                let mut answered = false;
                let mut tries = 0;
                while !answered {
                    tries += 1;
                    assert!(tries < 50, "intent {key} never got an answer");
                    let lost = rng.random_bool(0.35);
                    let request = api
                        .client
                        .post(api.url(path))
                        .bearer_auth(&api.key)
                        .header("content-type", "application/json")
                        .header("idempotency-key", &key)
                        .body(body.clone());
                    let response = request.send().await.expect("request");
                    let status = response.status();
                    assert!(!status.is_server_error(), "{key}: {status}");
                    if lost {
                        drop(response);
                        continue;
                    }
                    answered = status.is_success();
                }
            }
            entry_ids
        }
    }))
    .await;
    let entry_ids: HashSet<String> = results.into_iter().flatten().collect();
    let job_intents = CLIENTS as usize * INTENTS_PER_CLIENT - entry_ids.len();
    assert_eq!(job_count(&api).await, job_intents);
    let all_entries: Vec<Value> = entry_ids
        .iter()
        .map(|id| {
            let n: usize = id.rsplit('-').next().unwrap().parse().unwrap();
            json!({"id": id, "date": "2026-10-09", "direction": "sale",
                   "amount": format!("{}.00", n + 1), "gst_rate": "12"})
        })
        .collect();
    let check = api.import(Value::Array(all_entries)).await;
    assert_eq!(
        check.json(),
        json!({"inserted": 0, "skipped": entry_ids.len()}),
        "every entry was stored once, none lost"
    );
}

// ------------------------------------------------------- group commit

fn submission(key: Option<(&str, &str)>, body: &str) -> Submission {
    let created_at = now_ms();
    let job = NewJob {
        job_id: new_job_id(),
        tenant_id: "tenant-a".into(),
        kind: "sleep".into(),
        params: r#"{"ms": 0}"#.into(),
        max_attempts: 5,
        priority: Default::default(),
        external: false,
    };
    let key = key.map(|(key, fingerprint)| SubmissionKey {
        tenant_id: "tenant-a".into(),
        key: key.into(),
        fingerprint: fingerprint.into(),
        expires_at: created_at + 60_000,
        response: StoredResponse {
            status: 202,
            headers: vec![],
            body: body.as_bytes().to_vec(),
        },
    });
    Submission {
        key,
        ..Submission::at_once(job, created_at)
    }
}

async fn jobs_in(store: &Store, submissions: &[Submission]) -> usize {
    let mut found = 0;
    for s in submissions {
        found += usize::from(
            store
                .get_job_unscoped(&s.job.job_id)
                .await
                .unwrap()
                .is_some(),
        );
    }
    found
}

/// One group commit settles each submit's key as the single path would:
/// a stored key replays (or refuses), and of two submits with one key in
/// the batch the first makes the job and the second replays its answer.
async fn a_batch_of_submits_settles_each_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let store = env.store().await;
    store.migrate().await.unwrap();
    let earlier = [submission(Some(("k-stored", "fp-1")), "stored answer")];
    assert_eq!(
        store
            .submit_batch(&earlier, store::Publishing::Relay)
            .await
            .unwrap(),
        [Submitted::Inserted]
    );

    let batch = [
        submission(Some(("k-new", "fp-2")), "new answer"),
        submission(Some(("k-new", "fp-2")), "would be a second job"),
        submission(Some(("k-new", "fp-other")), "another request"),
        submission(None, "no key"),
        submission(Some(("k-stored", "fp-1")), "would be a second job"),
        submission(Some(("k-stored", "fp-other")), "another request"),
    ];
    let replay = |body: &str| {
        Submitted::Found(KeyLookup::Replay(StoredResponse {
            status: 202,
            headers: vec![],
            body: body.as_bytes().to_vec(),
        }))
    };
    assert_eq!(
        store
            .submit_batch(&batch, store::Publishing::Relay)
            .await
            .unwrap(),
        [
            Submitted::Inserted,
            replay("new answer"),
            Submitted::Found(KeyLookup::Mismatch),
            Submitted::Inserted,
            replay("stored answer"),
            Submitted::Found(KeyLookup::Mismatch),
        ]
    );
    assert_eq!(jobs_in(&store, &batch[..1]).await, 1);
    assert_eq!(jobs_in(&store, &batch[1..3]).await, 0, "no second job");
    assert_eq!(jobs_in(&store, &batch[3..4]).await, 1);
    assert_eq!(jobs_in(&store, &batch[4..]).await, 0, "no second job");
}

/// Postgres: a key that a concurrent writer holds uncommitted makes the
/// batch wait for it; once committed, its stored answer settles that
/// submit (no second job), and the rest of the batch is written. (SQLite's
/// write lock lets no two writers overlap.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_concurrent_writer_commits_first_replays_its_answer() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let store = env.store().await;
    store.migrate().await.unwrap();
    let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
    let mut other = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO idempotency_keys (tenant_id, idem_key, fingerprint, created_at, expires_at,
             response_status, response_headers, response_body)
         VALUES ('tenant-a', 'k-raced', 'fp', now(), now() + interval '1 minute', 202,
                 '[]', 'x')",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    let batch = [
        submission(None, "no key"),
        submission(Some(("k-raced", "fp")), "raced"),
    ];
    let written = {
        let store = store.clone();
        let batch = batch.clone();
        tokio::spawn(async move { store.submit_batch(&batch, store::Publishing::Relay).await })
    };
    // The batch now waits on the uncommitted key.
    wait_for_a_blocked_statement(&env).await;
    other.commit().await.unwrap();
    assert_eq!(
        written.await.unwrap().unwrap(),
        [
            Submitted::Inserted,
            Submitted::Found(KeyLookup::Replay(StoredResponse {
                status: 202,
                headers: vec![],
                body: b"x".to_vec(),
            }))
        ]
    );
    assert_eq!(jobs_in(&store, &batch[..1]).await, 1);
    assert_eq!(jobs_in(&store, &batch[1..]).await, 0, "no second job");
    pool.close().await;
}

crate::on_both_backends!(
    the_same_key_twice_makes_one_job_and_replays_the_answer_byte_for_byte,
    a_reordered_body_replays_and_a_changed_one_is_refused,
    bad_keys_are_refused_with_400_and_change_nothing,
    fifty_concurrent_requests_with_one_key_do_the_work_once,
    the_same_key_in_two_tenants_is_two_keys,
    a_refused_request_stores_nothing_so_the_corrected_one_runs,
    a_request_that_ends_in_a_5xx_stores_nothing_and_its_retry_runs,
    an_expired_key_is_new_again,
    a_cancel_with_a_key_is_replayed,
    a_lossy_network_with_retries_does_each_intent_once,
    a_batch_of_submits_settles_each_key,
);

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(
    the_same_key_twice_makes_one_job_and_replays_the_answer_byte_for_byte,
    fifty_concurrent_requests_with_one_key_do_the_work_once,
    a_lossy_network_with_retries_does_each_intent_once,
    a_batch_of_submits_settles_each_key,
);

/// The first of two requests with one key holds before it saves its key;
/// the second commits the key meanwhile; the first finds it taken, and the
/// key's row gone (expired and swept) before it reads it: the only answer
/// it has is 409 "in progress", with `Retry-After`, and it stores nothing.
#[tokio::test]
async fn a_key_taken_and_gone_before_it_is_read_again_answers_409_in_progress() {
    let env = TestEnv::new(Backend::PgRedis).await;
    let gates = tempfile::tempdir().expect("a folder for the gates");
    let (save, read_again) = (gates.path().join("save"), gates.path().join("read-again"));
    let failpoints = format!(
        "api::key_save_held_until=1*return({});api::key_read_again_held_until=1*return({})",
        save.display(),
        read_again.display()
    );
    let holding = env
        .start_api(&[("EMBEDDED_WORKER", "false"), ("FAILPOINTS", &failpoints)])
        .await;
    let other = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    // Refused inside the effect without a write (the job id is not one),
    // so the two requests wait on no lock of each other.
    let body = r#"{"url":"https://93.184.216.34/hook","job_id":"not-a-job"}"#;
    let reached = |gate: &std::path::Path| gate.with_extension("held").exists();

    let first = tokio::spawn(Api::read(
        holding
            .client
            .request(Method::POST, holding.url("/v1/webhooks"))
            .bearer_auth(&holding.key)
            .header("content-type", "application/json")
            .header("idempotency-key", "k-in-progress")
            .body(body),
    ));
    wait::until_true(
        "the first request holds before saving its key",
        std::time::Duration::from_secs(30),
        async || reached(&save),
    )
    .await;
    let second = post_with_key(&other, "/v1/webhooks", "k-in-progress", body).await;
    assert_eq!(second.status, StatusCode::NOT_FOUND, "{}", second.text);
    std::fs::write(&save, b"").expect("the save gate opens");
    wait::until_true(
        "the first request holds before reading the key again",
        std::time::Duration::from_secs(30),
        async || reached(&read_again),
    )
    .await;
    let key_rows = "SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'k-in-progress'";
    assert_eq!(env.count(key_rows).await, 1, "the second request's key");
    env.execute_sql("DELETE FROM idempotency_keys WHERE idem_key = 'k-in-progress'")
        .await;
    std::fs::write(&read_again, b"").expect("the read gate opens");

    let first = first.await.expect("the first request");
    assert_eq!(first.status, StatusCode::CONFLICT, "{}", first.text);
    assert!(first.header("retry-after").is_some(), "{:?}", first.headers);
    assert!(
        first.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("is being processed")),
        "{}",
        first.text
    );
    assert_eq!(env.count(key_rows).await, 0, "nothing stored under the key");
}
