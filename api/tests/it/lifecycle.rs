//! A job's life through the API: submit, poll, long-poll, result, list.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{Backend, TestEnv};

async fn submitted_job_runs_to_success_and_serves_its_result(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;

    let reply = api.post("/v1/reports/sleep", &json!({"ms": 50})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let job = reply.json();
    let job_id = job["job_id"].as_str().unwrap();
    assert!(job_id.starts_with("job_"));
    assert_eq!(
        reply.header("location"),
        Some(format!("/v1/jobs/{job_id}").as_str())
    );
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(job["status"], "QUEUED");
    assert_eq!(job["kind"], "sleep");
    assert_eq!(job["params"], json!({"ms": 50}));
    assert_eq!(job["attempts"], 0);
    assert!(job["result_url"].is_null());

    let done = api.wait_final(job_id).await;
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["progress"], 1.0);
    assert!(done["started_at"].is_string() && done["finished_at"].is_string());
    assert_eq!(done["result_url"], format!("/v1/jobs/{job_id}/result"));
    let final_reply = api.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(
        final_reply.header("retry-after"),
        None,
        "no Retry-After once final"
    );

    let result = api.get(&format!("/v1/jobs/{job_id}/result")).await;
    assert_eq!(result.status, StatusCode::OK);
    assert_eq!(result.json()["slept_ms"], 50);
}

async fn long_poll_wakes_when_the_job_finishes_and_times_out_otherwise(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_embedded().await;

    let slow = api.submit("sleep", json!({"ms": 5000})).await;
    let started = std::time::Instant::now();
    let reply = api
        .get(&format!(
            "/v1/jobs/{}?wait=1",
            slow["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(started.elapsed().as_millis() >= 900, "held for the wait");
    assert!(["QUEUED", "RUNNING"].contains(&reply.json()["status"].as_str().unwrap()));
    assert_eq!(reply.header("retry-after"), Some("1"));

    let quick = api.submit("sleep", json!({"ms": 300})).await;
    let started = std::time::Instant::now();
    let reply = api
        .get(&format!(
            "/v1/jobs/{}?wait=30",
            quick["job_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(reply.json()["status"], "SUCCEEDED");
    assert!(
        started.elapsed().as_secs() < 20,
        "woke on completion, not at the deadline"
    );

    let reply = api
        .get(&format!(
            "/v1/jobs/{}?wait=soon",
            quick["job_id"].as_str().unwrap()
        ))
        .await;
    reply.assert_problem(422);
}

async fn listing_pages_through_every_job_once_newest_first(backend: Backend) {
    let env = TestEnv::new(backend).await;
    // No worker: the jobs stay QUEUED, which keeps the listing stable.
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let mut submitted = Vec::new();
    for i in 0..7 {
        let kind = if i % 2 == 0 { "sleep" } else { "gst-summary" };
        let params = if i % 2 == 0 {
            json!({"ms": 1})
        } else {
            json!({"month": "2026-10"})
        };
        submitted.push(
            api.submit(kind, params).await["job_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/jobs?limit=3&cursor={c}"),
            None => "/v1/jobs?limit=3".to_owned(),
        };
        let page = api.get(&path).await.json();
        pages += 1;
        if pages == 1 {
            // A job arriving mid-listing must not appear again further on.
            api.submit("sleep", json!({"ms": 1})).await;
        }
        for job in page["data"].as_array().unwrap() {
            seen.push(job["job_id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut newest_first = submitted.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    assert_eq!(pages, 3);

    let sleeps = api.get("/v1/jobs?kind=sleep&limit=200").await.json();
    assert_eq!(sleeps["data"].as_array().unwrap().len(), 5);
    let queued = api.get("/v1/jobs?status=QUEUED").await.json();
    assert_eq!(queued["data"].as_array().unwrap().len(), 8);
    let none = api.get("/v1/jobs?status=SUCCEEDED").await.json();
    assert!(none["data"].as_array().unwrap().is_empty());
    assert!(none["next_cursor"].is_null());

    for bad in [
        "limit=0",
        "limit=201",
        "limit=ten",
        "status=DONE",
        "cursor=nonsense",
    ] {
        api.get(&format!("/v1/jobs?{bad}"))
            .await
            .assert_problem(422);
    }
}

async fn another_tenants_job_is_not_found(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let other = api.as_tenant_b();
    let job = api.submit("sleep", json!({"ms": 1})).await;
    let job_id = job["job_id"].as_str().unwrap();

    for path in [
        format!("/v1/jobs/{job_id}"),
        format!("/v1/jobs/{job_id}/result"),
    ] {
        other.get(&path).await.assert_problem(404);
    }
    other
        .post(&format!("/v1/jobs/{job_id}/cancel"), &json!({}))
        .await
        .assert_problem(404);
    assert!(
        other.get("/v1/jobs").await.json()["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        api.job(job_id).await["status"],
        "QUEUED",
        "tenant b's cancel changed nothing"
    );
}

/// An idle keep-alive connection stays open past actix's default of 5 s,
/// so a client whose pool holds it longer is not cut off mid-request.
async fn an_idle_keep_alive_connection_stays_open(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = TestEnv::new(backend).await;
    let api = env.start_api(&[("EMBEDDED_WORKER", "false")]).await;
    let addr = api.base.trim_start_matches("http://");
    let mut connection = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    for round in 0..2 {
        if round == 1 {
            // Idle past actix's default of 5 s: the idleness is what is
            // tested, not a wait for something to happen.
            tokio::time::sleep(std::time::Duration::from_secs(6)).await;
        }
        connection.write_all(request.as_bytes()).await.unwrap();
        let mut answer = [0u8; 1024];
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            connection.read(&mut answer),
        )
        .await
        .expect("an answer")
        .unwrap();
        let head = String::from_utf8_lossy(&answer[..read]);
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "request {round} on the connection got {head:?}"
        );
    }
}

crate::on_both_backends!(
    an_idle_keep_alive_connection_stays_open,
    submitted_job_runs_to_success_and_serves_its_result,
    long_poll_wakes_when_the_job_finishes_and_times_out_otherwise,
    listing_pages_through_every_job_once_newest_first,
    another_tenants_job_is_not_found,
);

// The production shape through PgBouncer in transaction mode.
crate::through_pgbouncer!(
    submitted_job_runs_to_success_and_serves_its_result,
    long_poll_wakes_when_the_job_finishes_and_times_out_otherwise,
    listing_pages_through_every_job_once_newest_first,
);
