//! A webhook receiver of the test's own that records each job's
//! announcements (`job.succeeded`, `job.failed`, `job.cancelled`) as they
//! are acknowledged: the effect of a final status that a duplicate would
//! show, since every announcement of one job to one webhook carries a
//! `webhook-id` of its own, where a job's result, kept under the job's
//! key, can never be there twice.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use crate::{
    client::Api,
    receiver::{headers_of, serve_on_loopback},
    wait::Record,
};

/// One acknowledged delivery.
#[derive(Debug, Clone)]
pub struct Announcement {
    /// The `webhook-id` header: the event's id, the same on every retry.
    pub event_id: String,
    /// `job.succeeded`, `job.failed` or `job.cancelled`.
    pub event_type: String,
    pub job_id: String,
    pub body: Value,
    /// The `traceparent` header, when the sender traces its deliveries.
    pub traceparent: Option<String>,
}

struct Shared {
    record: Record<Announcement>,
    /// Answer 500 to every n-th request (0: never), so retries run.
    fail_every: u64,
    requests: std::sync::atomic::AtomicU64,
    /// The secrets a delivery's signature must verify with, one of them
    /// (none: signatures are not checked).
    secrets: std::sync::Mutex<Vec<String>>,
    /// Deliveries whose signature verified with none of `secrets`.
    unverified: std::sync::atomic::AtomicU64,
}

/// A receiver on 127.0.0.1 for every final status of a tenant's jobs.
pub struct Announcements {
    pub url: String,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
}

/// The setting the processes need to deliver to it (it is on loopback).
pub const ALLOW_LOOPBACK: (&str, &str) = ("WEBHOOK_ALLOW_PRIVATE", "true");

async fn receive(
    shared: web::Data<Shared>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let n = shared
        .requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        + 1;
    if shared.fail_every > 0 && n.is_multiple_of(shared.fail_every) {
        return HttpResponse::InternalServerError().finish();
    }
    let secrets = shared
        .secrets
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let headers = headers_of(&request);
    if !secrets.is_empty()
        && !secrets.iter().any(|secret| {
            standardwebhooks::Webhook::new(secret)
                .and_then(|hook| hook.verify(&body, &headers))
                .is_ok()
        })
    {
        shared
            .unverified
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return HttpResponse::Unauthorized().finish();
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    shared.record.push(Announcement {
        event_id: header("webhook-id").unwrap_or_default(),
        traceparent: header("traceparent"),
        event_type: body["type"].as_str().unwrap_or_default().to_owned(),
        job_id: body["data"]["job_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        body,
    });
    HttpResponse::Ok().finish()
}

impl Announcements {
    /// A receiver that acknowledges every delivery.
    pub fn start() -> Self {
        Self::failing_every(0)
    }

    /// A receiver that answers 500 to every `n`-th request (0: none), as a
    /// flaky receiver would; those are not recorded.
    pub fn failing_every(n: u64) -> Self {
        let shared = Arc::new(Shared {
            record: Record::default(),
            fail_every: n,
            requests: Default::default(),
            secrets: Default::default(),
            unverified: Default::default(),
        });
        let (addr, handle) = serve_on_loopback(web::Data::from(shared.clone()), receive);
        Announcements {
            url: format!("http://{addr}/announcements"),
            shared,
            handle,
        }
    }

    /// Registers this receiver for every final status of the jobs of
    /// `api`'s tenant; returns the webhook.
    pub async fn subscribe(&self, api: &Api) -> Value {
        let reply = api
            .post(
                "/v1/webhooks",
                &json!({"url": self.url, "events": ["job.succeeded", "job.failed", "job.cancelled"]}),
            )
            .await;
        assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
        reply.json()
    }

    /// From now on, acknowledges only deliveries signed with one of the
    /// secrets given so far (a webhook's `secret`, as its registration
    /// answered), and counts the others ([`Announcements::unverified`]),
    /// answering them 401.
    pub fn verify_with(&self, secret: &str) {
        self.shared
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(secret.to_owned());
    }

    /// Deliveries whose signature verified with no secret given to
    /// [`Announcements::verify_with`].
    pub fn unverified(&self) -> u64 {
        self.shared
            .unverified
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every acknowledged delivery so far, in order.
    pub fn all(&self) -> Vec<Announcement> {
        self.shared.record.all()
    }

    /// The distinct announcements of a job, as `(type, webhook-id)`: a
    /// retried delivery counts once, a second event twice.
    pub fn of_job(&self, job_id: &str) -> BTreeSet<(String, String)> {
        distinct(&self.all(), job_id)
    }

    /// Waits until the job has `n` distinct announcements, within `within`.
    pub async fn wait_for_job(&self, job_id: &str, n: usize, within: Duration) {
        self.shared
            .record
            .wait_until(&format!("{n} announcements of {job_id}"), within, |all| {
                distinct(all, job_id).len() >= n
            })
            .await;
    }

    /// Stops the receiver.
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

fn distinct(all: &[Announcement], job_id: &str) -> BTreeSet<(String, String)> {
    all.iter()
        .filter(|a| a.job_id == job_id)
        .map(|a| (a.event_type.clone(), a.event_id.clone()))
        .collect()
}

impl Drop for Announcements {
    fn drop(&mut self) {
        // The command is sent at once; nothing here can wait for it.
        std::mem::drop(self.handle.stop(false));
    }
}
