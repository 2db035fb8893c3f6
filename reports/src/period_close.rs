//! `period-close {"month": "YYYY-MM"}`: a saga (`docs/sagas.md`) that
//! locks the month's ledger, computes its GST summary, files it with the
//! tenant's filing endpoint, and records the month closed; a failure or a
//! cancel undoes the steps done, last first.

use std::{collections::BTreeMap, time::Duration};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{
    JobFailure, ParamsError, ReportKind,
    gst_summary::{month_rows, summary},
};
use crate::saga::{Saga, Step, StepContext};
use outbound::{ANSWER_LIMIT, Answer, SignedPost, signed_post};
use shared::{calendar::Month, report_params::GstSummaryParams};
use store::{LockOutcome, Store};

pub struct PeriodClose;

/// The month of the job's parameters (checked at submit, and again before
/// the first step), in its canonical text.
fn month_of(cx: &StepContext<'_>) -> String {
    cx.params["month"].as_str().unwrap_or_default().to_owned()
}

/// The kind's name: closing a month needs the `close` scope, where other
/// reports need `submit`.
pub const PERIOD_CLOSE: &str = "period-close";

impl Saga for PeriodClose {
    /// Same parameters as `gst-summary`.
    type Body = GstSummaryParams;

    fn name(&self) -> &'static str {
        PERIOD_CLOSE
    }

    fn about(&self) -> &'static str {
        "Closes a month and files its GST return with the tenant's filing endpoint: a saga of four steps (lock, summarise, file, record); when one fails for good, or a cancel comes, the steps done are undone, last first."
    }

    fn check(&self, params: &GstSummaryParams) -> Result<(), ParamsError> {
        super::GstSummary.check(params).map(drop)
    }

    /// A month already closed, or being closed, is refused (409): closing
    /// it again would file a second return. So is a tenant with no filing
    /// endpoint.
    fn refuse_submit<'a>(
        &'a self,
        store: &'a Store,
        tenant_id: &'a str,
        params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>> {
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

    fn refused_when(&self) -> Option<&'static str> {
        Some("the month is closed or being closed, or no filing endpoint is registered")
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
        signed_post(SignedPost {
            url: &endpoint.url,
            secret: &endpoint.secret,
            id: key,
            idempotency_key: Some(key),
            body: body.to_string(),
            allow_private: cx.job.settings.allow_private_addresses,
            timeout: cx.job.settings.http_timeout,
            user_agent: concat!("Receipt-Filing/", env!("CARGO_PKG_VERSION")),
            parent: None,
        })
        .await
        .map_err(|message| JobFailure::retryable("filing_unreachable", message))
    }
}

/// The longest filing reference kept.
pub const REFERENCE_LIMIT: usize = 255;

/// The reference of an accepted filing's answer: `{"reference": "..."}`,
/// at most [`REFERENCE_LIMIT`] characters with no control character; an
/// answer with no body, not JSON or without `reference` has none (`null`).
/// Anything else (a body over `ANSWER_LIMIT`, a reference that is not
/// such a string) is not an answer to trust: the error says why.
fn reference_of(answer: &Answer) -> Result<Option<String>, String> {
    if answer.over_size {
        return Err(format!(
            "the filing endpoint answered {} with a body over {ANSWER_LIMIT} bytes",
            answer.status
        ));
    }
    let Ok(parsed) = serde_json::from_slice::<Value>(&answer.body) else {
        return Ok(None);
    };
    match parsed.get("reference") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(reference))
            if reference.chars().count() <= REFERENCE_LIMIT
                && !reference.chars().any(char::is_control) =>
        {
            Ok(Some(reference.clone()))
        }
        Some(_) => Err(format!(
            "the filing endpoint answered {} with a reference that is not a string of at most {REFERENCE_LIMIT} characters without control characters",
            answer.status
        )),
    }
}

/// A refusal the other side will repeat (4xx but 408 and 429).
fn is_refusal(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429
}

/// The start of a receiver's answer, for an error message.
fn excerpt(answer: &Answer) -> String {
    if answer.over_size {
        return format!("(a body over {ANSWER_LIMIT} bytes)");
    }
    answer.text().chars().take(200).collect()
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
                200..=299 => match reference_of(&answer) {
                    Ok(reference) => Ok(json!({"status": answer.status, "reference": reference})),
                    // Accepted, maybe: retried under the same key, and
                    // withdrawn if it never answers well.
                    Err(message) => Err(JobFailure::retryable("filing_invalid_answer", message)),
                },
                status if is_refusal(status) => Err(JobFailure::permanent(
                    "filing_refused",
                    format!(
                        "the filing endpoint refused the return with {status}: {}",
                        excerpt(&answer)
                    ),
                )),
                status => Err(JobFailure::retryable(
                    "filing_unavailable",
                    format!(
                        "the filing endpoint answered {status}: {}",
                        excerpt(&answer)
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
                        excerpt(&answer)
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
