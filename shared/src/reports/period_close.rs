//! `period-close {"month": "YYYY-MM"}`: a saga (`docs/sagas.md`) that
//! locks the month's ledger, computes its GST summary, files it with the
//! tenant's filing endpoint, and records the month closed; a failure or a
//! cancel undoes the steps done, last first.

use std::{collections::BTreeMap, time::Duration};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{
    AnyReportKind, JobFailure, ParamsError, RawParams,
    gst_summary::{month_rows, summary},
};
use crate::{
    calendar::Month,
    saga::{Saga, Step, StepContext},
    store::{LockOutcome, Store},
    time::now_ms,
    webhooks::{guarded_client, parse_url, sign},
};

pub struct PeriodClose;

/// The month of the job's parameters (checked at submit, and again before
/// the first step), in its canonical text.
fn month_of(cx: &StepContext<'_>) -> String {
    cx.params["month"].as_str().unwrap_or_default().to_owned()
}

impl Saga for PeriodClose {
    fn name(&self) -> &'static str {
        "period-close"
    }

    /// Same parameters as `gst-summary`.
    fn validate(&self, params: RawParams<'_>) -> Result<(), ParamsError> {
        super::GstSummary.validate(params)
    }

    /// A month already closed, or being closed, is refused (409): closing
    /// it again would file a second return. So is a tenant with no filing
    /// endpoint.
    fn refuse_submit<'a>(
        &'a self,
        store: &'a Store,
        tenant_id: &'a str,
        params: &'a Value,
    ) -> BoxFuture<'a, crate::Result<Option<String>>> {
        Box::pin(async move {
            let month = params["month"].as_str().unwrap_or_default();
            if let Some(period) = store.get_period(tenant_id, month).await? {
                return Ok(Some(if period.state == "closed" {
                    format!(
                        "month {month} is closed (by {}); reopen it with POST /v1/periods/{month}/reopen to close it again",
                        period.job_id
                    )
                } else {
                    format!("month {month} is being closed by {}", period.job_id)
                }));
            }
            if store.get_filing_endpoint(tenant_id).await?.is_none() {
                return Ok(Some(
                    "no filing endpoint is registered: PUT /v1/filing-endpoint first".into(),
                ));
            }
            Ok(None)
        })
    }

    fn steps(&self) -> &'static [&'static dyn Step] {
        &[&LockMonth, &Summarise, &File, &Record]
    }

    fn result(&self, outputs: &BTreeMap<String, Value>) -> Value {
        let recorded = outputs.get("record").cloned().unwrap_or(Value::Null);
        json!({
            "month": recorded["month"],
            "state": "closed",
            "filing_reference": recorded["filing_reference"],
            "summary": outputs.get("summarise").cloned().unwrap_or(Value::Null),
        })
    }
}

/// 1. Imports dated in the month are refused from the commit of this step.
struct LockMonth;

impl Step for LockMonth {
    fn name(&self) -> &'static str {
        "lock"
    }

    fn action<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<Value, JobFailure>> {
        Box::pin(async move {
            let month = month_of(cx);
            let job = cx.job;
            let mut tx = cx.begin_local().await?;
            match job
                .store
                .lock_period(&mut tx, &job.tenant_id, &month, &job.job_id)
                .await?
            {
                LockOutcome::Locked => cx.commit_local(tx, json!({"month": month})).await,
                LockOutcome::Held(period) => Err(JobFailure::permanent(
                    "month_not_open",
                    format!(
                        "month {month} is {} by {}",
                        if period.state == "closed" {
                            "closed"
                        } else {
                            "being closed"
                        },
                        period.job_id
                    ),
                )),
            }
        })
    }

    fn compensate<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<(), JobFailure>> {
        Box::pin(async move {
            let month = month_of(cx);
            let job = cx.job;
            let mut tx = cx.begin_local().await?;
            job.store
                .unlock_period(&mut tx, &job.tenant_id, &month, &job.job_id)
                .await?;
            cx.commit_local(tx, Value::Null).await.map(drop)
        })
    }
}

/// 2. The month's GST summary, computed as `gst-summary` computes it.
struct Summarise;

impl Step for Summarise {
    fn name(&self) -> &'static str {
        "summarise"
    }

    fn action<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<Value, JobFailure>> {
        Box::pin(async move {
            let month = Month::parse(&month_of(cx)).ok_or_else(|| {
                JobFailure::permanent("invalid_params", "the month is not written YYYY-MM")
            })?;
            let rows = month_rows(&cx.job.store, &cx.job.tenant_id, month).await?;
            Ok(summary(month, &rows))
        })
    }

    /// It changed nothing.
    fn compensate<'a>(&'a self, _cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<(), JobFailure>> {
        Box::pin(async { Ok(()) })
    }
}

/// 3. The summary, sent to the tenant's filing endpoint.
struct File;

/// What a filing endpoint answered.
struct Answer {
    status: u16,
    body: String,
}

impl File {
    /// One signed POST to the tenant's filing endpoint, with `key` as its
    /// `Idempotency-Key` (and `webhook-id`, which the signature covers).
    async fn post(cx: &StepContext<'_>, key: &str, body: &Value) -> Result<Answer, JobFailure> {
        let endpoint = cx
            .job
            .store
            .get_filing_endpoint(&cx.job.tenant_id)
            .await?
            .ok_or_else(|| {
                JobFailure::permanent(
                    "no_filing_endpoint",
                    "no filing endpoint is registered (PUT /v1/filing-endpoint)",
                )
            })?;
        let unreachable = |message: String| JobFailure::retryable("filing_unreachable", message);
        let url = parse_url(&endpoint.url).map_err(unreachable)?;
        let client = guarded_client(
            &url,
            cx.job.settings.allow_private_addresses,
            cx.job.settings.http_timeout,
            concat!("Receipt-Filing/", env!("CARGO_PKG_VERSION")),
        )
        .await
        .map_err(unreachable)?;
        let body = body.to_string();
        let timestamp = now_ms() / 1000;
        let signature = sign(&endpoint.secret, key, timestamp, &body).map_err(unreachable)?;
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .header("webhook-id", key)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                unreachable(if e.is_timeout() {
                    format!(
                        "no answer within {}s",
                        cx.job.settings.http_timeout.as_secs_f64()
                    )
                } else {
                    e.to_string()
                })
            })?;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Ok(Answer { status, body })
    }
}

/// A refusal the other side will repeat (4xx but 408 and 429).
fn is_refusal(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429
}

/// The start of a receiver's answer, for an error message.
fn excerpt(body: &str) -> String {
    body.chars().take(200).collect()
}

impl Step for File {
    fn name(&self) -> &'static str {
        "file"
    }

    /// A little longer than the HTTP deadline, which ends a try first.
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }

    fn action<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<Value, JobFailure>> {
        Box::pin(async move {
            let month = month_of(cx);
            let summary = cx.output("summarise").cloned().unwrap_or(Value::Null);
            let filing = json!({
                "type": "gst.return",
                "month": month,
                "job_id": cx.job.job_id,
                "summary": summary,
            });
            let answer = File::post(cx, &cx.idempotency_key(), &filing).await?;
            match answer.status {
                200..=299 => {
                    let reference =
                        serde_json::from_str::<Value>(&answer.body)
                            .ok()
                            .and_then(|v| {
                                v.get("reference")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned)
                            });
                    Ok(json!({"status": answer.status, "reference": reference}))
                }
                status if is_refusal(status) => Err(JobFailure::permanent(
                    "filing_refused",
                    format!(
                        "the filing endpoint refused the return with {status}: {}",
                        excerpt(&answer.body)
                    ),
                )),
                status => Err(JobFailure::retryable(
                    "filing_unavailable",
                    format!(
                        "the filing endpoint answered {status}: {}",
                        excerpt(&answer.body)
                    ),
                )),
            }
        })
    }

    /// A withdrawal of the filing, with a key of its own. A receiver that
    /// never got the filing may answer 404: nothing to withdraw.
    fn compensate<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<(), JobFailure>> {
        Box::pin(async move {
            let reference = cx
                .output("file")
                .map(|o| o["reference"].clone())
                .unwrap_or(Value::Null);
            let withdrawal = json!({
                "type": "gst.withdrawal",
                "month": month_of(cx),
                "job_id": cx.job.job_id,
                "filing_idempotency_key": cx.idempotency_key(),
                "reference": reference,
            });
            let answer = File::post(cx, &cx.compensation_key(), &withdrawal).await?;
            match answer.status {
                200..=299 | 404 => Ok(()),
                status => Err(JobFailure::retryable(
                    "withdrawal_failed",
                    format!(
                        "the filing endpoint answered the withdrawal with {status}: {}",
                        excerpt(&answer.body)
                    ),
                )),
            }
        })
    }
}

/// 4. The month is closed, with the filing's reference.
struct Record;

/// Marks the month closed (or locked again), recording the step (or its
/// compensation) in the same transaction.
async fn mark_closed(
    cx: &StepContext<'_>,
    closed: bool,
    reference: Option<&str>,
    output: Value,
) -> Result<Value, JobFailure> {
    let job = cx.job;
    let mut tx = cx.begin_local().await?;
    job.store
        .set_period_closed(
            &mut tx,
            &job.tenant_id,
            &month_of(cx),
            &job.job_id,
            closed,
            reference,
        )
        .await?;
    cx.commit_local(tx, output).await
}

impl Step for Record {
    fn name(&self) -> &'static str {
        "record"
    }

    fn action<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<Value, JobFailure>> {
        Box::pin(async move {
            let month = month_of(cx);
            let reference = cx
                .output("file")
                .and_then(|o| o["reference"].as_str())
                .map(str::to_owned);
            let output = json!({"month": month, "state": "closed", "filing_reference": reference});
            mark_closed(cx, true, reference.as_deref(), output).await
        })
    }

    fn compensate<'a>(&'a self, cx: &'a StepContext<'a>) -> BoxFuture<'a, Result<(), JobFailure>> {
        Box::pin(async move { mark_closed(cx, false, None, Value::Null).await.map(drop) })
    }
}
