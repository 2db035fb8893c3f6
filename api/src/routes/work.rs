//! The worker protocol (`docs/workers.md`, `docs/api.md`, Workers): a
//! tenant's workers lease the due attempts of its registered kinds,
//! heartbeat them, and report how each ended. Every report is fenced by
//! the attempt's token: a stale one (the lease lapsed and another attempt
//! took over, or the job was cancelled or ended) is a 409 that changes
//! nothing, and one sent again after its answer was lost is answered as
//! the first was.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use actix_web::{HttpRequest, HttpResponse, http::header, web};
use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use shared::work::{
    AttemptReport, FailRequest, HeartbeatAnswer, HeartbeatRequest, LeaseAnswer, LeaseRequest,
    LeasedAttemptObject, ReportAnswer, ReportOutcome, ReportsAnswer, ReportsRequest, WorkerList,
    WorkerObject,
};
use shared::{
    ledger::FieldError,
    model::{AttemptOutcome, JobErrorObject, JobStatus, ResultBody},
    time::{backoff_delay, duration_ms, now_ms, to_rfc3339},
};
use store::{ExternalJobState, LeaseAsk, LeasedAttempt, LeasedKind, ReportedJob, SuccessWrite};
use tokio::sync::Notify;

use crate::{
    auth::{Tenant, WorkerKey, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::canonical_json,
    state::AppState,
};

/// Attempts one lease may take, at most.
const MOST_LEASED: u32 = 100;
/// The longest a lease waits for a due attempt.
pub const MOST_LEASE_WAIT: Duration = Duration::from_secs(30);
/// Kinds one lease may name, at most.
const MOST_KINDS: usize = 32;
/// A JSON result's size, at most; a bigger one is streamed in another
/// media type.
const MOST_JSON_RESULT: usize = 1024 * 1024;
/// A streamed result's size, at most.
pub const MOST_STREAMED_RESULT: u64 = 256 * 1024 * 1024;
/// An error message, at most (in characters).
const MOST_MESSAGE_CHARS: usize = 4_096;
/// A failure's details, at most (in bytes of JSON).
const MOST_DETAILS_BYTES: usize = 16 * 1024;

/// What the worker protocol needs beyond the store.
#[derive(Clone)]
pub struct WorkSettings {
    /// How long a lease lasts without a heartbeat (`JOB_LEASE`).
    pub lease: Duration,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Woken when external jobs may have become due: a submit of this
    /// process, or (Postgres) a NOTIFY on the queue's channel.
    pub woken: Arc<Notify>,
    /// How often a waiting lease looks again on its own.
    pub look: Duration,
}

/// An attempt's token: `{job_id}.{attempt}`, where `attempt` is the fence.
fn token_of(job_id: &str, attempt: i64) -> String {
    format!("{job_id}.{attempt}")
}

fn parse_token(token: &str) -> ApiResult<(String, i64)> {
    let unknown = || ApiError::NotFound(format!("there is no attempt {token:?}"));
    let (job_id, attempt) = token.rsplit_once('.').ok_or_else(unknown)?;
    let attempt: i64 = attempt.parse().map_err(|_| unknown())?;
    if !super::jobs::is_job_id(job_id) || attempt < 1 {
        return Err(unknown());
    }
    Ok((job_id.to_owned(), attempt))
}

fn check_worker_name(name: &str) -> Result<(), FieldError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            "worker",
            "must be 1 to 64 letters, digits, '.', '_', '-', ':' or '@'",
        ))
    }
}

/// The kinds a lease names, with what their attempts are held to: each a
/// kind the tenant registered (a deleted one still has jobs to lease) and
/// the key may work on.
async fn leased_kinds(
    state: &AppState,
    worker: &WorkerKey,
    names: &[String],
) -> ApiResult<Vec<LeasedKind>> {
    if names.is_empty() || names.len() > MOST_KINDS {
        return Err(ApiError::validation(
            "kinds",
            format!("must name 1 to {MOST_KINDS} registered kinds"),
        ));
    }
    let mut kinds: Vec<LeasedKind> = Vec::with_capacity(names.len());
    for name in names {
        if kinds.iter().any(|kind| kind.name == *name) {
            continue;
        }
        if !worker.may_work_on(name) {
            return Err(ApiError::Forbidden(format!(
                "this key may not work on kind {name:?}"
            )));
        }
        let kind = state
            .store
            .registered_kind(&worker.tenant_id, name)
            .await?
            .ok_or_else(|| {
                ApiError::validation("kinds", format!("{name:?} is not a registered kind"))
            })?;
        kinds.push(LeasedKind {
            name: kind.name,
            timeout_ms: kind.timeout_ms,
            max_running: kind.max_running,
        });
    }
    Ok(kinds)
}

fn attempt_object(leased: LeasedAttempt) -> ApiResult<LeasedAttemptObject> {
    let claim = leased.claim;
    let params = serde_json::from_str(&claim.params)
        .map_err(|e| ApiError::Internal(format!("stored parameters of {}: {e}", claim.job_id)))?;
    Ok(LeasedAttemptObject {
        token: token_of(&claim.job_id, claim.attempt),
        attempt: claim.counted_attempt,
        max_attempts: claim.max_attempts,
        job_id: claim.job_id,
        kind: claim.kind,
        params,
        priority: leased.priority,
        lease_expires_at: to_rfc3339(leased.lease_expires_at),
        deadline: to_rfc3339(leased.deadline),
        traceparent: claim.traceparent,
    })
}

/// Lease due attempts of the tenant's registered kinds: each leased as a
/// built-in worker claims one (counted against the job's attempts, under
/// the tenant's caps and the kind's, by priority), waiting up to
/// `wait_secs` when none is due.
#[utoipa::path(
    post, path = "/v1/work/lease", tag = "workers", operation_id = "lease",
    request_body = LeaseRequest,
    responses(
        (status = 200, body = LeaseAnswer, description = "the attempts taken; none when nothing came due within the wait"),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown or missing field"),
        (status = 403, description = "not a key with the work scope, or one that may not work on a kind named"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "a bad worker name, `max` or `wait_secs` out of range, or a kind that is not registered"),
        (status = 429, description = "a waiting lease over the tenant's MAX_LONG_POLLS, with Retry-After"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn lease(
    worker: WorkerKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let ask: LeaseRequest = json_body(&request, &body)?;
    check_worker_name(&ask.worker).map_err(|error| ApiError::Validation {
        detail: format!("{} {}", error.field, error.message),
        errors: vec![error],
    })?;
    let most = ask.max.unwrap_or(1);
    if !(1..=MOST_LEASED).contains(&most) {
        return Err(ApiError::validation(
            "max",
            format!("must be a whole number from 1 to {MOST_LEASED}"),
        ));
    }
    let wait = Duration::from_secs(ask.wait_secs.unwrap_or(0));
    if wait > MOST_LEASE_WAIT {
        return Err(ApiError::validation(
            "wait_secs",
            format!("must be 0 to {}", MOST_LEASE_WAIT.as_secs()),
        ));
    }
    let kinds = leased_kinds(&state, &worker, &ask.kinds).await?;
    // A waiting lease is a long poll: it counts against MAX_LONG_POLLS,
    // so a tenant cannot hold leases open without bound (each waiting
    // one looks again at every wake).
    let _open = (!wait.is_zero())
        .then(|| state.limits.long_poll(&worker.tenant_id))
        .transpose()?;
    let mut lease_ask = LeaseAsk {
        tenant_id: &worker.tenant_id,
        kinds: &kinds,
        most: most as usize,
        worker: &ask.worker,
        note_seen: true,
        lease: state.work.lease,
        caps: &state.caps,
    };
    let until = tokio::time::Instant::now() + wait;
    let leased = loop {
        // Armed before the look, so a wake between the look and the wait
        // is not missed.
        let woken = state.work.woken.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let leased = state.store.lease_external(&lease_ask).await?;
        lease_ask.note_seen = false;
        if !leased.is_empty() || tokio::time::Instant::now() >= until {
            break leased;
        }
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(state.work.look) => {}
            () = tokio::time::sleep_until(until) => {}
            () = state.shutdown.cancelled() => break Vec::new(),
        }
    };
    let attempts = leased
        .into_iter()
        .map(attempt_object)
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(HttpResponse::Ok().json(LeaseAnswer { attempts }))
}

/// The tenant's external job of a token, refused when the key may not
/// work on its kind.
async fn job_of(
    state: &AppState,
    worker: &WorkerKey,
    job_id: &str,
    token: &str,
) -> ApiResult<ExternalJobState> {
    let job = state.store.external_job(&worker.tenant_id, job_id).await?;
    reportable(worker, job, token)
}

/// The job of a report's token, as read: refused when the tenant has no
/// such job (404) or the key may not work on its kind (403).
fn reportable(
    worker: &WorkerKey,
    job: Option<ExternalJobState>,
    token: &str,
) -> ApiResult<ExternalJobState> {
    let job = job.ok_or_else(|| ApiError::NotFound(format!("there is no attempt {token:?}")))?;
    if !worker.may_work_on(&job.kind) {
        return Err(ApiError::Forbidden(format!(
            "this key may not work on kind {:?}",
            job.kind
        )));
    }
    Ok(job)
}

/// The job again, after a write on it: it exists (jobs are deleted only
/// long after they end), but a 404 rather than a 500 if not.
async fn reread(state: &AppState, tenant_id: &str, job_id: &str) -> ApiResult<ExternalJobState> {
    state
        .store
        .external_job(tenant_id, job_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("there is no job {job_id}")))
}

/// Why a call on attempt `attempt` of `job` is refused: the 409 that
/// names it (or a 404 for an attempt that never was).
fn refusal(job: &ExternalJobState, job_id: &str, attempt: i64) -> ApiError {
    let fenced = |reason, detail: String| ApiError::Fenced { reason, detail };
    if job.attempt < attempt {
        return ApiError::NotFound(format!(
            "there is no attempt {:?}",
            token_of(job_id, attempt)
        ));
    }
    if job.attempt > attempt {
        return fenced(
            "attempt-superseded",
            format!(
                "attempt {attempt} of job {job_id} was superseded: its lease lapsed and a later \
                 attempt took the job over"
            ),
        );
    }
    match job.status {
        JobStatus::Queued
            if matches!(
                job.error_type.as_deref(),
                Some("lease_expired" | "lease_not_taken_up")
            ) =>
        {
            fenced(
                "attempt-superseded",
                format!(
                    "the lease of attempt {attempt} of job {job_id} lapsed; the job waits for \
                     its next attempt"
                ),
            )
        }
        JobStatus::Queued => fenced(
            "attempt-ended",
            format!(
                "attempt {attempt} of job {job_id} already ended with a retryable failure; the \
                 job waits for its next attempt"
            ),
        ),
        JobStatus::Cancelled => fenced("job-cancelled", format!("job {job_id} was cancelled")),
        JobStatus::Running if job.deadline.is_some_and(|at| at <= now_ms()) => fenced(
            "attempt-timed-out",
            format!("attempt {attempt} of job {job_id} ran past its deadline"),
        ),
        JobStatus::Running => fenced(
            "attempt-superseded",
            format!("attempt {attempt} of job {job_id} is no longer held"),
        ),
        JobStatus::Succeeded | JobStatus::Failed => fenced(
            "attempt-ended",
            format!(
                "attempt {attempt} of job {job_id} already ended: the job is {}",
                job.status.as_str()
            ),
        ),
    }
}

/// Whether the job's attempt is the one the token names, still running.
fn is_held(job: &ExternalJobState, attempt: i64) -> bool {
    job.attempt == attempt && job.status == JobStatus::Running
}

/// Extend an attempt's lease (never past its deadline) and report its
/// progress; the answer says whether a cancel was asked for.
#[utoipa::path(
    post, path = "/v1/work/attempts/{token}/heartbeat", tag = "workers", operation_id = "heartbeat",
    params(("token" = String, Path, description = "the attempt's token, from its lease")),
    request_body(content = Option<HeartbeatRequest>, description = "optional"),
    responses(
        (status = 200, body = HeartbeatAnswer),
        (status = 403, description = "not a key with the work scope, or one that may not work on the job's kind"),
        (status = 404, description = "no such attempt of this tenant"),
        (status = 409, description = "the attempt is no longer held (`type` names why: attempt-superseded, attempt-timed-out, job-cancelled, attempt-ended); nothing changed"),
        (status = 422, description = "progress out of 0 to 1"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn heartbeat(
    worker: WorkerKey,
    state: web::Data<AppState>,
    token: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let (job_id, attempt) = parse_token(&token)?;
    let beat: HeartbeatRequest = if body.is_empty() {
        HeartbeatRequest::default()
    } else {
        json_body(&request, &body)?
    };
    if beat
        .progress
        .is_some_and(|p| !(0.0..=1.0).contains(&p) || p.is_nan())
    {
        return Err(ApiError::validation("progress", "must be from 0 to 1"));
    }
    if worker.kinds().is_some() {
        job_of(&state, &worker, &job_id, &token).await?;
    }
    let beat = state
        .store
        .heartbeat_external(
            &worker.tenant_id,
            &job_id,
            attempt,
            state.work.lease,
            beat.progress,
        )
        .await?;
    match beat {
        Some(beat) => Ok(HttpResponse::Ok().json(HeartbeatAnswer {
            cancel_requested: beat.cancel_requested,
            lease_expires_at: to_rfc3339(beat.lease_expires_at),
            deadline: to_rfc3339(beat.deadline),
        })),
        None => {
            let job = job_of(&state, &worker, &job_id, &token).await?;
            Err(refusal(&job, &job_id, attempt))
        }
    }
}

fn report_answer(job_id: &str, job: &ExternalJobState) -> ReportAnswer {
    ReportAnswer {
        job_id: job_id.to_owned(),
        status: job.status,
        next_attempt_at: (job.status == JobStatus::Queued).then(|| to_rfc3339(job.run_after)),
    }
}

/// A result's body read as it streams in, refused (413) once it passes
/// its limit: a JSON result's, or a streamed one's.
struct BodyRead {
    most: u64,
    read: u64,
}

impl BodyRead {
    fn up_to(most: u64) -> Self {
        BodyRead { most, read: 0 }
    }

    /// The next piece of the body; `None` at its end.
    async fn next(&mut self, payload: &mut web::Payload) -> ApiResult<Option<web::Bytes>> {
        let Some(piece) = payload.next().await else {
            return Ok(None);
        };
        let piece = piece.map_err(|e| ApiError::BadRequest(format!("reading the body: {e}")))?;
        self.read += piece.len() as u64;
        if self.read > self.most {
            return Err(ApiError::PayloadTooLarge(format!(
                "a result is at most {} KiB in this media type (a JSON one at most 1 MiB; send \
                 a bigger one in another media type the kind declares, up to 256 MiB)",
                self.most / 1024
            )));
        }
        Ok(Some(piece))
    }
}

/// The media type of a request's body, without parameters, lowercase.
fn media_type_of(request: &HttpRequest) -> String {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Report an attempt's success with its result: a JSON document
/// (`application/json`, up to 1 MiB), or a body of another media type the
/// kind declares, streamed (up to 256 MiB).
#[utoipa::path(
    post, path = "/v1/work/attempts/{token}/complete", tag = "workers", operation_id = "complete",
    params(("token" = String, Path, description = "the attempt's token, from its lease")),
    request_body(content = Object, description = "the result, in one of the kind's `result_media_types`"),
    responses(
        (status = 200, body = ReportAnswer, description = "the job SUCCEEDED with this result; also the answer to the same complete sent again"),
        (status = 400, description = "a JSON result that is not valid JSON"),
        (status = 403, description = "not a key with the work scope, or one that may not work on the job's kind"),
        (status = 404, description = "no such attempt of this tenant"),
        (status = 409, description = "the attempt is no longer held, or it ended with another result (`type` names why); nothing changed"),
        (status = 413, description = "a JSON result over 1 MiB, or a streamed one over 256 MiB"),
        (status = 415, description = "a media type the kind does not declare"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn complete(
    worker: WorkerKey,
    state: web::Data<AppState>,
    token: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> ApiResult<HttpResponse> {
    let (job_id, attempt) = parse_token(&token)?;
    let job = job_of(&state, &worker, &job_id, &token).await?;
    let kind = state
        .store
        .registered_kind(&worker.tenant_id, &job.kind)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("job {job_id}: its kind has no row")))?;
    let media_type = media_type_of(&request);
    if !kind.result_media_types.contains(&media_type) {
        return Err(ApiError::UnsupportedMediaType(format!(
            "a result of kind {} is one of {}, not {:?}",
            kind.name,
            kind.result_media_types.join(", "),
            media_type
        )));
    }
    if media_type == "application/json" {
        complete_with_document(&state, &worker.tenant_id, &job_id, attempt, job, payload).await
    } else {
        complete_with_stream(
            &state,
            &worker.tenant_id,
            &job_id,
            attempt,
            job,
            &media_type,
            payload,
        )
        .await
    }
}

async fn complete_with_document(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    job: ExternalJobState,
    mut payload: web::Payload,
) -> ApiResult<HttpResponse> {
    let mut body = web::BytesMut::new();
    let mut read = BodyRead::up_to(MOST_JSON_RESULT as u64);
    while let Some(piece) = read.next(&mut payload).await? {
        body.extend_from_slice(&piece);
    }
    let result: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the result is not valid JSON: {e}")))?;
    if is_held(&job, attempt) {
        let written = state
            .store
            .finish_succeeded(&[SuccessWrite {
                job_id: job_id.to_owned(),
                attempt,
                result: ResultBody::Document(canonical_json(&result)),
                traceparent: telemetry::trace::traceparent(&tracing::Span::current()),
            }])
            .await?;
        if written.first() == Some(&true) {
            return Ok(HttpResponse::Ok().json(succeeded(job_id)));
        }
    }
    let answer = document_not_written(state, tenant_id, job_id, attempt, &result).await?;
    Ok(HttpResponse::Ok().json(answer))
}

fn succeeded(job_id: &str) -> ReportAnswer {
    ReportAnswer {
        job_id: job_id.to_owned(),
        status: JobStatus::Succeeded,
        next_attempt_at: None,
    }
}

/// A JSON result its attempt did not store (not held, or no longer): the
/// same complete sent again is answered as the first was; anything else
/// is refused.
async fn document_not_written(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    result: &Value,
) -> ApiResult<ReportAnswer> {
    let job = reread(state, tenant_id, job_id).await?;
    if job.attempt == attempt && job.status == JobStatus::Succeeded {
        let stored = state.store.stored_result(tenant_id, job_id).await?;
        if let Some(store::StoredResult::Document(stored)) = stored
            && serde_json::from_str::<Value>(&stored).ok().as_ref() == Some(result)
        {
            return Ok(report_answer(job_id, &job));
        }
        return Err(ApiError::Fenced {
            reason: "attempt-ended",
            detail: format!(
                "attempt {attempt} of job {job_id} already succeeded with another result"
            ),
        });
    }
    Err(refusal(&job, job_id, attempt))
}

/// A streamed result, written in chunks as it arrives, each write fenced
/// by the attempt; the success names how many there are. At least one
/// chunk is written, so that the media type of an empty result is known.
#[allow(clippy::too_many_arguments)]
async fn complete_with_stream(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    job: ExternalJobState,
    media_type: &str,
    mut payload: web::Payload,
) -> ApiResult<HttpResponse> {
    let chunk_bytes = reports::CHUNK_BYTES;
    if !is_held(&job, attempt) {
        return replay_of_stream(state, tenant_id, job_id, attempt, payload).await;
    }
    state.store.discard_chunks_before(job_id, attempt).await?;
    let mut buffer: Vec<u8> = Vec::with_capacity(chunk_bytes);
    let mut seq = 0_i64;
    let mut read = BodyRead::up_to(MOST_STREAMED_RESULT);
    loop {
        let piece = read.next(&mut payload).await?;
        let end = piece.is_none();
        if let Some(piece) = piece {
            buffer.extend_from_slice(&piece);
        }
        while buffer.len() >= chunk_bytes || (end && (!buffer.is_empty() || seq == 0)) {
            let take = buffer.len().min(chunk_bytes);
            let chunk: Vec<u8> = buffer.drain(..take).collect();
            let written = state
                .store
                .write_result_bytes(job_id, attempt, seq, &chunk, media_type)
                .await?;
            if !written {
                let now = reread(state, tenant_id, job_id).await?;
                return Err(refusal(&now, job_id, attempt));
            }
            seq += 1;
            if end && buffer.is_empty() {
                break;
            }
        }
        if end {
            break;
        }
    }
    let written = state
        .store
        .finish_succeeded(&[SuccessWrite {
            job_id: job_id.to_owned(),
            attempt,
            result: ResultBody::Chunks(seq),
            traceparent: telemetry::trace::traceparent(&tracing::Span::current()),
        }])
        .await?;
    let now = reread(state, tenant_id, job_id).await?;
    if written.first() == Some(&true) {
        return Ok(HttpResponse::Ok().json(report_answer(job_id, &now)));
    }
    Err(refusal(&now, job_id, attempt))
}

/// A streamed complete of an attempt no longer held: answered as the
/// first was when it repeats the result that attempt stored (the same
/// bytes), refused otherwise.
async fn replay_of_stream(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    mut payload: web::Payload,
) -> ApiResult<HttpResponse> {
    let job = reread(state, tenant_id, job_id).await?;
    if !(job.attempt == attempt && job.status == JobStatus::Succeeded) {
        return Err(refusal(&job, job_id, attempt));
    }
    let mut sent = Sha256::new();
    let mut read = BodyRead::up_to(MOST_STREAMED_RESULT);
    while let Some(piece) = read.next(&mut payload).await? {
        sent.update(&piece);
    }
    let mut stored = Sha256::new();
    if let Some(store::StoredResult::Chunks { attempt: of, count }) =
        state.store.stored_result(tenant_id, job_id).await?
    {
        for seq in 0..count {
            let chunk = state.store.result_bytes_chunk(job_id, of, seq).await?;
            stored.update(chunk.and_then(|c| c.data).unwrap_or_default());
        }
        if stored.finalize() == sent.finalize() {
            return Ok(HttpResponse::Ok().json(report_answer(job_id, &job)));
        }
    }
    Err(ApiError::Fenced {
        reason: "attempt-ended",
        detail: format!("attempt {attempt} of job {job_id} already succeeded with another result"),
    })
}

/// Report that an attempt failed: retryable (another attempt follows
/// after a backoff while attempts are left) or for good.
#[utoipa::path(
    post, path = "/v1/work/attempts/{token}/fail", tag = "workers", operation_id = "fail",
    params(("token" = String, Path, description = "the attempt's token, from its lease")),
    request_body = FailRequest,
    responses(
        (status = 200, body = ReportAnswer, description = "the job is QUEUED for a retry, FAILED, or CANCELLED (a cancel asked while it ran wins over a retry); also the answer to the same fail sent again"),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown or missing field"),
        (status = 403, description = "not a key with the work scope, or one that may not work on the job's kind"),
        (status = 404, description = "no such attempt of this tenant"),
        (status = 409, description = "the attempt is no longer held (`type` names why); nothing changed"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "a bad error_type, a message over 4096 characters, or details that are not a JSON object of at most 16 KiB"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn fail(
    worker: WorkerKey,
    state: web::Data<AppState>,
    token: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let (job_id, attempt) = parse_token(&token)?;
    let failure: FailRequest = json_body(&request, &body)?;
    let (error, retryable) = checked_failure(failure, "")?;
    let job = job_of(&state, &worker, &job_id, &token).await?;
    let answer = apply_fail(&state, &worker, &job_id, attempt, job, error, retryable).await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// A fail's error, checked: its `error_type`, `message` and `details`
/// (each field named after `prefix`, for a report among several).
fn checked_failure(failure: FailRequest, prefix: &str) -> ApiResult<(JobErrorObject, bool)> {
    let error_type = failure.error_type.unwrap_or_else(|| "error".to_owned());
    let well_named = (1..=64).contains(&error_type.len())
        && error_type
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !well_named {
        return Err(ApiError::validation(
            &format!("{prefix}error_type"),
            "must be 1 to 64 letters, digits, '.', '_' or '-'",
        ));
    }
    if failure.message.chars().count() > MOST_MESSAGE_CHARS {
        return Err(ApiError::validation(
            &format!("{prefix}message"),
            format!("must be at most {MOST_MESSAGE_CHARS} characters"),
        ));
    }
    if let Some(details) = &failure.details
        && (!details.is_object() || details.to_string().len() > MOST_DETAILS_BYTES)
    {
        return Err(ApiError::validation(
            &format!("{prefix}details"),
            "must be a JSON object of at most 16 KiB",
        ));
    }
    let error = JobErrorObject {
        error_type,
        message: failure.message,
        details: failure.details,
    };
    Ok((error, failure.retryable))
}

/// Ends the held attempt `attempt` of `job` (as it was read) with a
/// failure: a retry after the backoff while attempts are left, or for
/// good; answers a repeat of the fail that ended it as the first was.
async fn apply_fail(
    state: &AppState,
    worker: &WorkerKey,
    job_id: &str,
    attempt: i64,
    job: ExternalJobState,
    error: JobErrorObject,
    retryable: bool,
) -> ApiResult<ReportAnswer> {
    if is_held(&job, attempt) {
        let outcome = if retryable && job.counted_attempt < job.max_attempts {
            let delay = backoff_delay(
                job.counted_attempt,
                state.work.retry_base,
                state.work.retry_max,
            );
            AttemptOutcome::RetryAt {
                at: now_ms() + duration_ms(delay),
                error: error.clone(),
            }
        } else {
            AttemptOutcome::Failed {
                error: error.clone(),
            }
        };
        let traceparent = telemetry::trace::traceparent(&tracing::Span::current());
        let applied = state
            .store
            .finish_attempt(job_id, attempt, &outcome, traceparent.as_deref())
            .await?;
        let now = reread(state, &worker.tenant_id, job_id).await?;
        if applied {
            if let Some(name) = &job.worker {
                state
                    .store
                    .count_worker_failure(&worker.tenant_id, name)
                    .await?;
            }
            return Ok(report_answer(job_id, &now));
        }
        return answer_again_or_refuse(&now, job_id, attempt, &error);
    }
    answer_again_or_refuse(&job, job_id, attempt, &error)
}

/// A fail of an attempt no longer held: answered as the first was when it
/// repeats the error that attempt ended with, while the job has not moved
/// on to another attempt; refused otherwise.
fn answer_again_or_refuse(
    job: &ExternalJobState,
    job_id: &str,
    attempt: i64,
    error: &JobErrorObject,
) -> ApiResult<ReportAnswer> {
    let same = job.attempt == attempt
        && matches!(job.status, JobStatus::Queued | JobStatus::Failed)
        && job.error_type.as_deref() == Some(error.error_type.as_str())
        && job.error_message.as_deref() == Some(error.message.as_str());
    if same {
        return Ok(report_answer(job_id, job));
    }
    Err(refusal(job, job_id, attempt))
}

/// Report that an attempt stopped at a cancel the heartbeat announced:
/// the job ends CANCELLED.
#[utoipa::path(
    post, path = "/v1/work/attempts/{token}/cancelled", tag = "workers", operation_id = "cancelled",
    params(("token" = String, Path, description = "the attempt's token, from its lease")),
    responses(
        (status = 200, body = ReportAnswer, description = "the job is CANCELLED; also the answer to the same report sent again"),
        (status = 403, description = "not a key with the work scope, or one that may not work on the job's kind"),
        (status = 404, description = "no such attempt of this tenant"),
        (status = 409, description = "the attempt is no longer held (`type` names why); nothing changed"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn cancelled(
    worker: WorkerKey,
    state: web::Data<AppState>,
    token: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let (job_id, attempt) = parse_token(&token)?;
    let job = job_of(&state, &worker, &job_id, &token).await?;
    let answer = apply_cancelled(&state, &worker.tenant_id, &job_id, attempt, &job).await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// Ends the held attempt `attempt` of `job` (as it was read) CANCELLED;
/// answers a repeat as the first was.
async fn apply_cancelled(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    attempt: i64,
    job: &ExternalJobState,
) -> ApiResult<ReportAnswer> {
    if is_held(job, attempt) {
        let traceparent = telemetry::trace::traceparent(&tracing::Span::current());
        state
            .store
            .finish_attempt(
                job_id,
                attempt,
                &AttemptOutcome::Cancelled,
                traceparent.as_deref(),
            )
            .await?;
    }
    let now = reread(state, tenant_id, job_id).await?;
    if now.attempt == attempt && now.status == JobStatus::Cancelled {
        return Ok(report_answer(job_id, &now));
    }
    Err(refusal(&now, job_id, attempt))
}

/// Reports one call may carry, at most.
pub const MOST_REPORTS: usize = 100;

/// What a report among several asks, checked before anything is written.
enum Asked {
    Complete(Value),
    Fail(JobErrorObject, bool),
    Cancelled,
}

/// Report how several attempts ended, in one call: each report is applied
/// as its own complete (with a JSON result), fail or cancelled call would
/// be, and answered with what that call would have answered, so one
/// refused report leaves the others as they are. The successes are written
/// together.
#[utoipa::path(
    post, path = "/v1/work/reports", tag = "workers", operation_id = "report",
    request_body = ReportsRequest,
    responses(
        (status = 200, body = ReportsAnswer, description = "each report's own answer, in the order sent: 200 with the job's status, or the 403, 404, 409 or 415 its own call would have had; also the answer to the same reports sent again"),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown or missing field, an unknown `outcome`"),
        (status = 403, description = "not a key with the work scope"),
        (status = 413, description = "a body over 1 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "no reports or over 100, a token named twice, or a fail's bad error_type, message or details (the field is named as `reports[i].message`); nothing changed"),
    ),
    security(("bearer" = ["work"]))
)]
pub async fn reports(
    worker: WorkerKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let ask: ReportsRequest = json_body(&request, &body)?;
    if ask.reports.is_empty() || ask.reports.len() > MOST_REPORTS {
        return Err(ApiError::validation(
            "reports",
            format!("must hold 1 to {MOST_REPORTS} reports"),
        ));
    }
    // Every check that needs no database comes first: a bad report
    // refuses the call before any other is applied.
    let mut tokens: HashSet<String> = HashSet::with_capacity(ask.reports.len());
    let mut asked: Vec<(String, Asked, Option<String>)> = Vec::with_capacity(ask.reports.len());
    for (i, report) in ask.reports.into_iter().enumerate() {
        let token = report.token().to_owned();
        if !tokens.insert(token.clone()) {
            return Err(ApiError::validation(
                &format!("reports[{i}].token"),
                "names an attempt another report of this call names",
            ));
        }
        let (what, traceparent) = match report {
            AttemptReport::Complete {
                result,
                traceparent,
                ..
            } => (Asked::Complete(result), traceparent),
            AttemptReport::Fail {
                retryable,
                error_type,
                message,
                details,
                traceparent,
                ..
            } => {
                let failure = FailRequest {
                    retryable,
                    error_type,
                    message,
                    details,
                };
                let (error, retryable) = checked_failure(failure, &format!("reports[{i}]."))?;
                (Asked::Fail(error, retryable), traceparent)
            }
            AttemptReport::Cancelled { traceparent, .. } => (Asked::Cancelled, traceparent),
        };
        // An attempt's span, when the worker traces it: the job's webhook
        // deliveries join its trace, as they join a report's own call.
        let traceparent = telemetry::trace::traceparent_of(&telemetry::trace::context_from(
            traceparent.as_deref(),
        ))
        .or_else(|| telemetry::trace::traceparent(&tracing::Span::current()));
        asked.push((token, what, traceparent));
    }
    let parsed: Vec<ApiResult<(String, i64)>> =
        asked.iter().map(|(token, ..)| parse_token(token)).collect();
    let job_ids: Vec<String> = parsed
        .iter()
        .filter_map(|target| target.as_ref().ok().map(|(job_id, _)| job_id.clone()))
        .collect();
    let jobs: HashMap<String, ReportedJob> = state
        .store
        .external_jobs(&worker.tenant_id, &job_ids)
        .await?
        .into_iter()
        .collect();
    // Each report's job (or why it has none), and the successes to write
    // together.
    let mut targets: Vec<ApiResult<(String, i64, ExternalJobState)>> =
        Vec::with_capacity(asked.len());
    let mut writes: Vec<SuccessWrite> = Vec::new();
    for ((token, what, traceparent), target) in asked.iter().zip(parsed) {
        let target = match target {
            Ok((job_id, attempt)) => {
                // Two reports may name two attempts of one job.
                let job = jobs.get(&job_id).cloned();
                checked_target(&worker, token, what, job).map(|job| (job_id, attempt, job))
            }
            Err(error) => Err(error),
        };
        if let (Ok((job_id, attempt, job)), Asked::Complete(result)) = (&target, what)
            && is_held(job, *attempt)
        {
            writes.push(SuccessWrite {
                job_id: job_id.clone(),
                attempt: *attempt,
                result: ResultBody::Document(canonical_json(result)),
                traceparent: traceparent.clone(),
            });
        }
        targets.push(target);
    }
    let written: HashSet<(String, i64)> = state
        .store
        .finish_succeeded(&writes)
        .await?
        .into_iter()
        .zip(&writes)
        .filter(|(applied, _)| *applied)
        .map(|(_, write)| (write.job_id.clone(), write.attempt))
        .collect();
    let mut answers = Vec::with_capacity(asked.len());
    for ((token, what, _), target) in asked.into_iter().zip(targets) {
        let answer = match target {
            Err(error) => Err(error),
            Ok((job_id, attempt, job)) => match what {
                Asked::Complete(_) if written.contains(&(job_id.clone(), attempt)) => {
                    Ok(succeeded(&job_id))
                }
                Asked::Complete(result) => {
                    document_not_written(&state, &worker.tenant_id, &job_id, attempt, &result).await
                }
                Asked::Fail(error, retryable) => {
                    apply_fail(&state, &worker, &job_id, attempt, job, error, retryable).await
                }
                Asked::Cancelled => {
                    apply_cancelled(&state, &worker.tenant_id, &job_id, attempt, &job).await
                }
            },
        };
        answers.push(report_outcome(token, answer)?);
    }
    Ok(HttpResponse::Ok().json(ReportsAnswer { reports: answers }))
}

/// The job a report among several names, refused as its own call would
/// refuse it: a 404 for no such attempt of this tenant, a 403 for a kind
/// the key may not work on, a 415 for a result of a kind that takes no
/// JSON.
fn checked_target(
    worker: &WorkerKey,
    token: &str,
    what: &Asked,
    job: Option<ReportedJob>,
) -> ApiResult<ExternalJobState> {
    let takes_json = job.as_ref().is_some_and(|job| job.takes_json);
    let job = reportable(worker, job.map(|job| job.state), token)?;
    if matches!(what, Asked::Complete(_)) && !takes_json {
        return Err(ApiError::UnsupportedMediaType(format!(
            "a result of kind {} is not application/json; send it with \
             POST /v1/work/attempts/{{token}}/complete in a media type the kind declares",
            job.kind
        )));
    }
    Ok(job)
}

/// A report's answer among several: what its own call would have
/// answered. An outage or a bug fails the whole call instead (5xx, which
/// a worker sends again: every report is answered as the first was).
fn report_outcome(token: String, answer: ApiResult<ReportAnswer>) -> ApiResult<ReportOutcome> {
    match answer {
        Ok(answer) => Ok(ReportOutcome {
            token,
            status: 200,
            body: serde_json::to_value(answer)
                .map_err(|e| ApiError::Internal(format!("a report's answer: {e}")))?,
        }),
        Err(error @ (ApiError::Unavailable(_) | ApiError::Internal(_))) => Err(error),
        Err(error) => {
            let problem = error.problem();
            Ok(ReportOutcome {
                token,
                status: problem.status,
                body: serde_json::to_value(problem)
                    .map_err(|e| ApiError::Internal(format!("a report's problem: {e}")))?,
            })
        }
    }
}

/// A worker that has not leased for this long, and holds nothing, is no
/// longer connected: a long poll waits at most [`MOST_LEASE_WAIT`].
const CONNECTED_WITHIN: Duration = Duration::from_secs(60);

pub fn worker_object(worker: store::WorkerRecord, now: i64) -> WorkerObject {
    WorkerObject {
        connected: worker.holding > 0 || now - worker.last_seen_at <= duration_ms(CONNECTED_WITHIN),
        name: worker.name,
        kinds: worker.kinds,
        holding: worker.holding,
        leased: worker.leased,
        failed: worker.failed,
        first_seen_at: to_rfc3339(worker.first_seen_at),
        last_seen_at: to_rfc3339(worker.last_seen_at),
    }
}

/// The tenant's workers over HTTP, the last seen first: what each runs,
/// holds and has done.
#[utoipa::path(
    get, path = "/v1/workers", tag = "workers", operation_id = "listWorkers",
    responses((status = 200, body = WorkerList)),
    security(("bearer" = ["read"]))
)]
pub async fn workers(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
) -> ApiResult<HttpResponse> {
    let now = now_ms();
    let workers = state
        .store
        .workers(&tenant.0)
        .await?
        .into_iter()
        .map(|worker| worker_object(worker, now))
        .collect();
    Ok(HttpResponse::Ok().json(WorkerList { workers }))
}
