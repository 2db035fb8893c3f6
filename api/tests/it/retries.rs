//! `POST /v1/jobs/{job_id}/retry`: a FAILED or CANCELLED job is retried as
//! a new job with the same kind and parameters, linked by `retry_of`; the
//! job itself keeps its one final status.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Api, Backend, Reply, TestEnv};

async fn retry(api: &Api, job_id: &str, key: Option<&str>) -> Reply {
    let mut request = api
        .client
        .request(Method::POST, api.url(&format!("/v1/jobs/{job_id}/retry")))
        .bearer_auth(&api.key);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    Api::read(request).await
}

fn id_of(job: &Value) -> &str {
    job["job_id"].as_str().expect("job_id")
}

async fn retrying_a_cancelled_job_makes_a_new_job_that_runs_and_links_back(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let original = api.submit("sleep", json!({"ms": 1500})).await;
    let original_id = id_of(&original);
    let cancel = api
        .post(&format!("/v1/jobs/{original_id}/cancel"), &json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{}", cancel.text);
    assert_eq!(api.wait_final(original_id).await["status"], "CANCELLED");

    let reply = retry(&api, original_id, Some("retry-1")).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let again = reply.json();
    let again_id = id_of(&again);
    assert_ne!(again_id, original_id, "a retry is a new job");
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/jobs/{again_id}").as_str())
    );
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(again["status"], "QUEUED");
    assert_eq!(again["kind"], "sleep");
    assert_eq!(again["params"], json!({"ms": 1500}));
    assert_eq!(again["retry_of"], original_id);
    assert_eq!(again["attempts"], 0);

    let done = api.wait_final(again_id).await;
    assert_eq!(done["status"], "SUCCEEDED", "{done}");
    assert_eq!(done["retry_of"], original_id);
    let kept = api.job(original_id).await;
    assert_eq!(kept["status"], "CANCELLED", "the original keeps its status");
    assert!(kept["retry_of"].is_null());

    let replay = retry(&api, original_id, Some("retry-1")).await;
    assert_eq!(replay.status, StatusCode::ACCEPTED);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(id_of(&replay.json()), again_id, "the same new job");
    let listed = api.get("/v1/jobs").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 2, "{listed}");
}

async fn each_retry_of_a_failed_job_makes_one_new_job(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let params = json!({"ms": 0, "fail_times": 10, "permanent": true});
    let original = api.submit("sleep", params.clone()).await;
    let original_id = id_of(&original);
    let failed = api.wait_final(original_id).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");

    let first = retry(&api, original_id, Some("first")).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let second = retry(&api, original_id, Some("second")).await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{}", second.text);
    let (first, second) = (first.json(), second.json());
    assert_ne!(id_of(&first), id_of(&second));
    for retried in [&first, &second] {
        let done = api.wait_final(id_of(retried)).await;
        // The same parameters fail the same way: the retry ran.
        assert_eq!(done["status"], "FAILED", "{done}");
        assert_eq!(done["attempts"], 1);
        assert_eq!(done["params"], params);
        assert_eq!(done["retry_of"], original_id);
    }
    let kept = api.job(original_id).await;
    assert_eq!(kept["status"], "FAILED");
    assert_eq!(kept["attempts"], failed["attempts"]);
}

async fn only_a_failed_or_cancelled_job_of_the_tenant_can_be_retried(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;
    let succeeded = api.submit("sleep", json!({"ms": 0})).await;
    let succeeded_id = id_of(&succeeded);
    api.wait_final(succeeded_id).await;
    let running = api.submit("sleep", json!({"ms": 20000})).await;
    let running_id = id_of(&running);
    api.wait_status(running_id, "RUNNING").await;

    let refused = retry(&api, succeeded_id, Some("s")).await;
    let problem = refused.assert_problem(409);
    // No Retry-After: unlike a key still in progress, sending it again
    // changes nothing.
    assert_eq!(refused.header("retry-after"), None);
    assert!(
        problem["detail"].as_str().unwrap().contains("SUCCEEDED"),
        "{problem}"
    );
    let problem = retry(&api, running_id, Some("r")).await.assert_problem(409);
    assert!(
        problem["detail"].as_str().unwrap().contains("RUNNING"),
        "{problem}"
    );
    retry(&api, "job_0000000000000000000000000000000a", Some("u"))
        .await
        .assert_problem(404);
    retry(&api, "not-a-job", Some("m"))
        .await
        .assert_problem(404);

    // Another tenant's failed job is not found.
    let b = api.as_tenant_b();
    let theirs = b
        .submit("sleep", json!({"fail_times": 1, "permanent": true}))
        .await;
    b.wait_final(id_of(&theirs)).await;
    retry(&api, id_of(&theirs), Some("b"))
        .await
        .assert_problem(404);

    // Without a key a retry could make two jobs: refused.
    let cancelled = api.submit("sleep", json!({"ms": 20000})).await;
    let cancelled_id = id_of(&cancelled);
    api.post(&format!("/v1/jobs/{cancelled_id}/cancel"), &json!({}))
        .await;
    api.wait_final(cancelled_id).await;
    let problem = retry(&api, cancelled_id, None).await.assert_problem(400);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key"),
        "{problem}"
    );
    // A key used for another request.
    retry(&api, succeeded_id, Some("once")).await;
    let problem = retry(&api, cancelled_id, Some("once"))
        .await
        .assert_problem(422);
    assert_eq!(problem["errors"][0]["field"], "Idempotency-Key");

    let listed = api.get("/v1/jobs").await.json();
    assert_eq!(
        listed["data"].as_array().unwrap().len(),
        3,
        "no refused retry made a job: {listed}"
    );
    api.post(&format!("/v1/jobs/{running_id}/cancel"), &json!({}))
        .await;
}

crate::on_both_backends!(
    retrying_a_cancelled_job_makes_a_new_job_that_runs_and_links_back,
    each_retry_of_a_failed_job_makes_one_new_job,
    only_a_failed_or_cancelled_job_of_the_tenant_can_be_retried,
);

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(each_retry_of_a_failed_job_makes_one_new_job,);
