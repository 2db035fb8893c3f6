//! A client of one running api, as a test (or the bench) talks to it: a
//! key per client, answers read whole, and the submit and wait helpers
//! every scenario needs.

use std::time::Duration;

use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::{Value, json};

use crate::{
    process::Process,
    tenants::{KEY_A, KEY_B},
    wait,
};

/// A client of one running api.
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    /// The key requests are sent with (tenant-a unless changed).
    pub key: String,
    /// The api process; `None` for a second client of the same api.
    pub process: Option<Process>,
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the answer is a problem document with this status.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "body: {}",
            self.text
        );
        let body = self.json();
        for member in ["type", "title", "status", "detail"] {
            assert!(
                body.get(member).is_some(),
                "problem without {member}: {body}"
            );
        }
        assert_eq!(body["status"], status);
        body
    }
}

/// Whether a job's status is final.
pub fn is_final(job: &Value) -> bool {
    ["SUCCEEDED", "FAILED", "CANCELLED"].contains(&job["status"].as_str().unwrap_or(""))
}

impl Api {
    /// A client of the api `process` once it prints where it listens
    /// (within 60 s), sending tenant-a's key.
    pub fn once_listening(process: Process) -> Api {
        let line = process.wait_for_line("listening on http://");
        let addr = line.trim().trim_start_matches("listening on http://");
        Api {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            key: KEY_A.to_owned(),
            process: Some(process),
        }
    }

    pub fn as_tenant_b(&self) -> Api {
        self.with_key(KEY_B)
    }

    /// Another client of the same api, sending this key.
    pub fn with_key(&self, key: &str) -> Api {
        Api {
            base: self.base.clone(),
            client: self.client.clone(),
            key: key.to_owned(),
            process: None,
        }
    }

    /// The api process's id.
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("the api process").pid()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request to `path` with the key, to add to before it is sent.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(&self.key)
    }

    /// Sends `request` and reads the answer whole; an error is the
    /// transport's (no answer at all).
    pub async fn try_read(request: reqwest::RequestBuilder) -> reqwest::Result<Reply> {
        let response = request.send().await?;
        Ok(Reply {
            status: response.status(),
            headers: response.headers().clone(),
            text: response.text().await?,
        })
    }

    pub async fn read(request: reqwest::RequestBuilder) -> Reply {
        Self::try_read(request).await.expect("request")
    }

    /// The calls the api has answered on any of `routes` (their patterns,
    /// as `/v1/work/attempts/{token}/complete`), from its metrics.
    pub async fn calls_to(&self, routes: &[&str]) -> u64 {
        self.route_sum("receipt_http_requests_total{", routes).await as u64
    }

    /// The seconds the api has spent answering calls on any of `routes`,
    /// from its metrics.
    pub async fn seconds_in(&self, routes: &[&str]) -> f64 {
        self.route_sum("receipt_http_request_seconds_sum{", routes)
            .await
    }

    /// The sum of a metric's series (the lines starting `series`) of any
    /// of `routes`.
    async fn route_sum(&self, series: &str, routes: &[&str]) -> f64 {
        let reply = Self::read(self.client.get(self.url("/metrics"))).await;
        assert!(reply.status.is_success(), "metrics: {}", reply.text);
        reply
            .text
            .lines()
            .filter(|line| line.starts_with(series))
            .filter(|line| {
                routes
                    .iter()
                    .any(|route| line.contains(&format!("route=\"{route}\"")))
            })
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    /// Sends a request with the key; `body` as JSON when given.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Reply {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        match Self::try_read(request).await {
            Ok(reply) => reply,
            Err(error) => {
                let exited = self.process.as_ref().and_then(Process::exited);
                panic!("request to {path} failed: {error}; the api process exit status: {exited:?}")
            }
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::POST, path, Some(body)).await
    }

    /// Submits a job and returns its object (asserting 202).
    pub async fn submit(&self, kind: &str, params: Value) -> Value {
        let reply = self.post(&format!("/v1/reports/{kind}"), &params).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
        reply.json()
    }

    pub async fn job(&self, job_id: &str) -> Value {
        let reply = self.get(&format!("/v1/jobs/{job_id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.json()
    }

    /// Long-polls until the job is final (at most 60 s).
    pub async fn wait_final(&self, job_id: &str) -> Value {
        for _ in 0..6 {
            let reply = self.get(&format!("/v1/jobs/{job_id}?wait=10")).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            let job = reply.json();
            if is_final(&job) {
                return job;
            }
        }
        panic!("job {job_id} did not finish within 60 s");
    }

    /// Waits until the job has this status (at most 30 s).
    pub async fn wait_status(&self, job_id: &str, status: &str) -> Value {
        self.wait_job(job_id, &format!("status {status}"), |job| {
            job["status"] == status
        })
        .await
    }

    /// Waits until `holds` is true of the job (at most 30 s), and returns it.
    pub async fn wait_job(
        &self,
        job_id: &str,
        what: &str,
        holds: impl Fn(&Value) -> bool,
    ) -> Value {
        wait::until_ok(
            &format!("job {job_id}: {what}"),
            Duration::from_secs(30),
            async || {
                let job = self.job(job_id).await;
                if holds(&job) { Ok(job) } else { Err(job) }
            },
        )
        .await
    }

    pub async fn import(&self, entries: Value) -> Reply {
        self.post("/v1/ledger/entries", &json!({ "entries": entries }))
            .await
    }
}
