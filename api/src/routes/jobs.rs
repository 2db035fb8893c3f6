use std::{collections::HashMap, time::Duration};

use actix_web::web::Bytes;
use actix_web::{
    HttpRequest, HttpResponse,
    http::{StatusCode, header},
    web,
};
use reports::{ChunkRenderer, PERIOD_CLOSE, ResultFormat};
use serde::Serialize;
use shared::{
    ids::new_job_id,
    model::{Job, JobObject, JobStatus, WaitReason},
};
use store::{CancelOutcome, JobFilter, RetryOutcome, Scope, Store, StoredResult};
use tokio::{sync::broadcast, time::Instant};
use utoipa::ToSchema;

use super::paging::{cut, is_id, limit_and_cursor};
use crate::{
    auth::{Caller, Tenant, scope},
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, RequestBody, execute},
    state::AppState,
};

/// `Retry-After` while a job is not final and nothing says it will wait
/// longer, in seconds.
pub const POLL_AFTER_SECS: &str = "1";
/// The longest `Retry-After` of a job that waits for a known time.
const MOST_POLL_AFTER_SECS: i64 = 300;

/// Seconds until a poll of a job that is not final is worth making: until
/// the end of the wait Receipt knows of (a delayed start, a backoff), at
/// least 1 and at most `MOST_POLL_AFTER_SECS`.
pub fn poll_after(job: &Job) -> i64 {
    let now = shared::time::now_ms();
    match job.waiting_at(now) {
        Some((_, Some(until))) => ((until - now + 999) / 1000).clamp(1, MOST_POLL_AFTER_SECS),
        _ => 1,
    }
}

/// A job object answer, with `Retry-After` while the job is not final.
pub fn job_response(
    mut builder: actix_web::HttpResponseBuilder,
    job: &Job,
    object: &JobObject,
) -> HttpResponse {
    if !job.status.is_final() {
        builder.insert_header((header::RETRY_AFTER, poll_after(job)));
    }
    builder.json(object)
}

/// The job object, with a saga's `phase` and `steps` (`docs/api.md`),
/// and, for a job parked at a cap, how many jobs hold it there.
pub async fn job_object(state: &AppState, job: &Job) -> ApiResult<JobObject> {
    let mut object = job.to_object();
    if let Some(waiting) = object.waiting.as_mut() {
        let limit = match waiting.reason {
            WaitReason::TenantConcurrencyLimit => Some(state.caps.per_tenant),
            WaitReason::KindConcurrencyLimit => state.caps.of_kind(&job.kind),
            _ => None,
        };
        if limit.is_some() {
            let (tenant, kind) = state
                .store
                .running_counts(&job.tenant_id, &job.kind)
                .await?;
            waiting.running = Some(match waiting.reason {
                WaitReason::KindConcurrencyLimit => kind,
                _ => tenant,
            });
            waiting.limit = limit.map(i64::from);
        }
    }
    let names = state
        .registry
        .get(&job.kind)
        .map(|kind| kind.step_names())
        .unwrap_or_default();
    if !names.is_empty() {
        let (run, records) = state.store.saga_state(&job.job_id).await?;
        let (phase, steps) = ::reports::saga::job_view(&names, run.as_ref(), &records);
        object.phase = Some(phase);
        object.steps = Some(steps);
    }
    Ok(object)
}

/// The 202 of a submit (and of a retry).
pub fn accepted(job: &Job) -> ApiResult<Answer> {
    Answer::json(
        StatusCode::ACCEPTED,
        &job.to_object(),
        vec![
            (
                header::LOCATION.to_string(),
                format!("/v1/jobs/{}", job.job_id),
            ),
            (header::RETRY_AFTER.to_string(), poll_after(job).to_string()),
        ],
    )
}

/// The longest `?wait=` honoured, in seconds.
pub(crate) const MAX_WAIT_SECS: u64 = 60;
/// A long poll re-reads the job at least this often, in case a
/// notification was missed (another process on SQLite sends none).
const RECHECK: Duration = Duration::from_millis(500);

#[derive(Serialize, ToSchema)]
pub struct JobPage {
    pub data: Vec<JobObject>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

fn not_found(job_id: &str) -> ApiError {
    ApiError::NotFound(format!("there is no job {job_id}"))
}

/// Whether `text` has the form of a job id (`job_` + 32 hex digits). Any
/// other id names no job, and is not sent to the database (Postgres refuses
/// text with a NUL, for one).
pub fn is_job_id(text: &str) -> bool {
    is_id(text, "job_")
}

/// Get a job; `?wait=N` holds the request until the job is final or N
/// seconds pass.
#[utoipa::path(
    get, path = "/v1/jobs/{job_id}", tag = "jobs", operation_id = "getJob",
    params(
        ("job_id" = String, Path),
        ("wait" = Option<u64>, Query, description = "seconds to wait for a final status (at most 60 honoured)"),
    ),
    responses(
        (status = 200, body = JobObject, headers(("Retry-After" = u64, description = "while not final: seconds until polling again is worthwhile"))),
        (status = 404, description = "no job of this tenant has this id"),
        (status = 422, description = "wait is not a whole number; `errors` names it"),
        (status = 429, description = "over the tenant's request rate, or its long polls held open (MAX_LONG_POLLS)"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    job_id: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> ApiResult<HttpResponse> {
    if !is_job_id(&job_id) {
        return Err(not_found(&job_id));
    }
    let wait = match query.get("wait") {
        None => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::validation("wait", "must be a whole number of seconds"))?
            .min(MAX_WAIT_SECS),
    };
    let job = if wait == 0 {
        state.store.get_job(&tenant.0, &job_id).await?
    } else {
        let _open = state.limits.long_poll(&tenant.0)?;
        wait_for_final(&state, &tenant.0, &job_id, Duration::from_secs(wait)).await?
    }
    .ok_or_else(|| not_found(&job_id))?;
    let object = job_object(&state, &job).await?;
    Ok(job_response(HttpResponse::Ok(), &job, &object))
}

async fn wait_for_final(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    wait: Duration,
) -> ApiResult<Option<Job>> {
    let deadline = Instant::now() + wait;
    // Subscribe before reading, so a job finishing in between is not missed.
    let mut finished = state.signals.subscribe_finished();
    loop {
        let job = state.store.get_job(tenant_id, job_id).await?;
        let now = Instant::now();
        match &job {
            Some(job) if !job.status.is_final() && now < deadline => {}
            _ => return Ok(job),
        }
        tokio::select! {
            () = finished_signal(&mut finished, job_id) => {}
            () = tokio::time::sleep(RECHECK.min(deadline - now)) => {}
            // The process is stopping: answer with the job as it is now, so
            // the server's drain is not held up by a waiting client.
            () = state.shutdown.cancelled() => {
                return state.store.get_job(tenant_id, job_id).await.map_err(Into::into);
            }
        }
    }
}

async fn finished_signal(finished: &mut broadcast::Receiver<String>, job_id: &str) {
    loop {
        match finished.recv().await {
            Ok(id) if id == job_id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// The report of a `SUCCEEDED` job; `Accept: text/csv` for tabular kinds.
/// A report stored in chunks (`ledger-export`) is streamed as it is read,
/// without a `Content-Length`.
#[utoipa::path(
    get, path = "/v1/jobs/{job_id}/result", tag = "jobs", operation_id = "getJobResult",
    params(("job_id" = String, Path)),
    responses(
        (status = 200, description = "the report: JSON, or CSV for a tabular kind asked with `Accept: text/csv`; a big one is streamed (chunked transfer coding), and an answer cut short means a failure, to retry", content(
            (Object = "application/json"),
            (String = "text/csv"),
        )),
        (status = 404, description = "no job of this tenant has this id"),
        (status = 409, description = "the job has not SUCCEEDED"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn result(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    job_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    job_result(&state, &tenant.0, &job_id, wants_csv(&request)).await
}

/// The answer of `GET /v1/jobs/{job_id}/result`: CSV when asked for and
/// the kind has it, else JSON.
pub async fn job_result(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
    csv: bool,
) -> ApiResult<HttpResponse> {
    if !is_job_id(job_id) {
        return Err(not_found(job_id));
    }
    let job = state
        .store
        .get_job(tenant_id, job_id)
        .await?
        .ok_or_else(|| not_found(job_id))?;
    if job.status != JobStatus::Succeeded {
        return Err(ApiError::Conflict {
            detail: format!(
                "job {job_id} is {}; a result exists only once it has SUCCEEDED",
                job.status.as_str()
            ),
            ids: None,
        });
    }
    let stored = state
        .store
        .stored_result(tenant_id, job_id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("job {job_id} succeeded without a result")))?;
    let kind = state.registry.get(&job.kind);
    let (attempt, count) = match stored {
        // A result stored whole is a kind's JSON document, whatever the Accept.
        StoredResult::Document(body) => {
            return Ok(HttpResponse::Ok()
                .content_type("application/json")
                .body(body));
        }
        StoredResult::Chunks { attempt, count } => (attempt, count),
    };
    let Some(kind) = kind else {
        // A registered kind's result, streamed by its worker: bytes of
        // the media type the worker sent, served as they were stored.
        return bytes_result(state, job_id, attempt, count).await;
    };
    let params: serde_json::Value = serde_json::from_str(&job.params)
        .map_err(|e| ApiError::Internal(format!("stored parameters of {job_id}: {e}")))?;
    let csv = csv
        .then(|| kind.chunk_renderer(&params, ResultFormat::Csv))
        .flatten();
    let (content_type, renderer) = match csv {
        Some(renderer) => (CSV, renderer),
        None => (
            "application/json",
            kind.chunk_renderer(&params, ResultFormat::Json)
                .ok_or_else(|| {
                    ApiError::Internal(format!("job {job_id}: its kind renders no JSON"))
                })?,
        ),
    };
    let chunks = ChunkedResult {
        store: state.store.clone(),
        job_id: job_id.to_owned(),
        attempt,
        count,
    };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .streaming(chunks.stream(renderer)))
}

const CSV: &str = "text/csv; charset=utf-8";

/// A result stored in chunks, on its way to a client.
/// A result streamed by a worker over HTTP: its chunks' bytes in order,
/// with the media type they were sent with, read one chunk at a time as
/// the client takes them.
async fn bytes_result(
    state: &AppState,
    job_id: &str,
    attempt: i64,
    count: i64,
) -> ApiResult<HttpResponse> {
    let first = state
        .store
        .result_bytes_chunk(job_id, attempt, 0)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("job {job_id}: its result has no chunk 0")))?;
    let media_type = first.media_type.clone().ok_or_else(|| {
        ApiError::Internal(format!(
            "job {job_id}: a registered kind's result without a media type"
        ))
    })?;
    let store = state.store.clone();
    let job_id = job_id.to_owned();
    let chunks = futures::stream::unfold((Some(first), 0_i64), move |(read, seq)| {
        let (store, job_id) = (store.clone(), job_id.clone());
        async move {
            let (mut read, mut seq) = (read, seq);
            loop {
                if seq >= count {
                    return None;
                }
                let chunk = match read.take() {
                    Some(chunk) => Ok(Some(chunk)),
                    None => store.result_bytes_chunk(&job_id, attempt, seq).await,
                };
                return match chunk {
                    // An empty piece would read as the end of a chunked body.
                    Ok(Some(chunk)) if chunk.data.as_ref().is_none_or(Vec::is_empty) => {
                        seq += 1;
                        continue;
                    }
                    Ok(Some(chunk)) => Some((
                        Ok::<_, store::Error>(Bytes::from(chunk.data.unwrap_or_default())),
                        (None, seq + 1),
                    )),
                    Ok(None) => {
                        tracing::error!(
                            job_id,
                            seq,
                            "a result chunk is missing; cutting the answer"
                        );
                        Some((
                            Err(store::Error::Corrupt(format!(
                                "chunk {seq} of {job_id} is missing"
                            ))),
                            (None, count),
                        ))
                    }
                    Err(error) => {
                        tracing::error!(job_id, %error, "cannot send the rest of a result; cutting the answer");
                        Some((Err(error), (None, count)))
                    }
                };
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type(media_type)
        .streaming(chunks))
}

struct ChunkedResult {
    store: Store,
    job_id: String,
    attempt: i64,
    count: i64,
}

/// Where a streamed answer is: what to send next.
enum Piece {
    Head,
    Chunk(i64),
    Tail,
    Done,
}

impl ChunkedResult {
    /// The answer, rendered one chunk at a time as the client takes it
    /// (actix polls for the next piece once the last has been written), so
    /// the process holds about one chunk of it at once. A chunk that cannot
    /// be read ends the stream with an error: the connection is cut, and
    /// the client sees an incomplete answer, never a shorter one that looks
    /// whole.
    fn stream(
        self,
        renderer: Box<dyn ChunkRenderer>,
    ) -> impl futures::Stream<Item = Result<Bytes, store::Error>> + 'static {
        futures::stream::unfold(
            (self, renderer, Piece::Head),
            |(result, mut renderer, mut next)| async move {
                loop {
                    let (piece, after) = match next {
                        Piece::Head => (
                            renderer.head(),
                            if result.count > 0 {
                                Piece::Chunk(0)
                            } else {
                                Piece::Tail
                            },
                        ),
                        Piece::Chunk(seq) => (
                            result.read(seq, renderer.as_mut()).await,
                            if seq + 1 < result.count {
                                Piece::Chunk(seq + 1)
                            } else {
                                Piece::Tail
                            },
                        ),
                        Piece::Tail => (renderer.tail(), Piece::Done),
                        Piece::Done => return None,
                    };
                    match piece {
                        // An empty piece would read as the end of a chunked body.
                        Ok(text) if text.is_empty() => next = after,
                        Ok(text) => {
                            return Some((Ok(Bytes::from(text)), (result, renderer, after)));
                        }
                        Err(error) => {
                            tracing::error!(job_id = result.job_id, %error, "cannot send the rest of a result; cutting the answer");
                            return Some((Err(error), (result, renderer, Piece::Done)));
                        }
                    }
                }
            },
        )
    }

    async fn read(&self, seq: i64, renderer: &mut dyn ChunkRenderer) -> store::Result<String> {
        let body = self
            .store
            .result_chunk(&self.job_id, self.attempt, seq)
            .await?
            .ok_or_else(|| {
                store::Error::Corrupt(format!(
                    "chunk {seq} of {} of the result of {} is missing",
                    self.count, self.job_id
                ))
            })?;
        renderer.chunk(&body)
    }
}

fn wants_csv(request: &HttpRequest) -> bool {
    request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept.split(',').any(|part| {
                part.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("text/csv")
            })
        })
}

/// Cancel a job: at once when queued, at its next checkpoint when running.
#[utoipa::path(
    post, path = "/v1/jobs/{job_id}/cancel", tag = "jobs", operation_id = "cancelJob",
    params(("job_id" = String, Path)),
    responses(
        (status = 200, body = JobObject, headers(("Retry-After" = u64, description = "while not final"))),
        (status = 400, description = "a malformed Idempotency-Key"),
        (status = 404, description = "no job of this tenant has this id"),
        (status = 409, description = "the job already SUCCEEDED or FAILED, or the Idempotency-Key is still in progress"),
        (status = 422, description = "the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["submit"]))
)]
pub async fn cancel(
    tenant: Tenant<scope::Submit>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    job_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    cancel_job(&state, &tenant.0, &key, &request, &job_id).await
}

/// The effect and answer of `POST /v1/jobs/{job_id}/cancel`, also the
/// dashboard's.
pub async fn cancel_job(
    state: &AppState,
    tenant_id: &str,
    key: &IdempotencyKey,
    request: &HttpRequest,
    job_id: &str,
) -> ApiResult<HttpResponse> {
    if !is_job_id(job_id) {
        return Err(not_found(job_id));
    }
    // A cancel has no body: its fingerprint is its method and path.
    let response = execute(
        state,
        tenant_id,
        key,
        request,
        RequestBody::Sent(&[]),
        async |tx| match state.store.cancel_job(tx, tenant_id, job_id).await? {
            CancelOutcome::Done(job) => {
                let mut headers = Vec::new();
                if !job.status.is_final() {
                    headers.push((header::RETRY_AFTER.to_string(), POLL_AFTER_SECS.to_owned()));
                }
                Answer::json(StatusCode::OK, &job.to_object(), headers)
            }
            CancelOutcome::Conflict(job) => Err(ApiError::Conflict {
                detail: format!(
                    "job {job_id} already {}; it cannot be cancelled",
                    job.status.as_str()
                ),
                ids: None,
            }),
            CancelOutcome::NotFound => Err(not_found(job_id)),
        },
    )
    .await?;
    // Wakes this process's long polls; other processes hear the NOTIFY.
    state.signals.job_finished(job_id);
    Ok(response)
}

/// Retry a FAILED or CANCELLED job: a new job with the same kind and
/// parameters, whose `retry_of` names this one. The job itself keeps its
/// final status.
#[utoipa::path(
    post, path = "/v1/jobs/{job_id}/retry", tag = "jobs", operation_id = "retryJob",
    params(
        ("job_id" = String, Path),
        ("Idempotency-Key" = String, Header, description = "required here: 1 to 255 visible ASCII characters, bare or as a quoted string; a retry of the request with the same key answers with the same new job and makes no other"),
    ),
    responses(
        (status = 202, description = "the new job, queued; poll the Location", body = JobObject,
         headers(("Location" = String, description = "the new job: /v1/jobs/{job_id}"), ("Retry-After" = u64, description = "seconds until polling is worthwhile"))),
        (status = 400, description = "no Idempotency-Key, or a malformed one"),
        (status = 404, description = "no job of this tenant has this id"),
        (status = 409, description = "the job is not FAILED or CANCELLED (the detail names its status), its kind is not enabled, or the Idempotency-Key is still in progress"),
        (status = 422, description = "the Idempotency-Key was used with a different request"),
        (status = 429, description = "over the tenant's request rate or active jobs (MAX_ACTIVE_JOBS); nothing stored"),
    ),
    security(("bearer" = ["submit"]))
)]
pub async fn retry(
    tenant: Tenant<scope::Submit>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    job_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    if key.0.is_none() {
        return Err(ApiError::BadRequest(
            "a retry makes a job: send an Idempotency-Key header, so that sending it again cannot make a second one".into(),
        ));
    }
    retry_job(&state, tenant.caller(), &key, &request, &job_id).await
}

/// The effect and answer of `POST /v1/jobs/{job_id}/retry`, also the
/// dashboard's.
pub async fn retry_job(
    state: &AppState,
    caller: &Caller,
    key: &IdempotencyKey,
    request: &HttpRequest,
    job_id: &str,
) -> ApiResult<HttpResponse> {
    if !is_job_id(job_id) {
        return Err(not_found(job_id));
    }
    let tenant_id = caller.tenant_id.as_str();
    // A retry of a period-close closes the month again.
    if let Some(job) = state.store.get_job(tenant_id, job_id).await?
        && job.kind == PERIOD_CLOSE
    {
        caller.require(Scope::Close)?;
    }
    state.limits.admit_job(&state.store, tenant_id).await?;
    let retry_id = new_job_id();
    let registered = state.store.registered_kinds(tenant_id).await?;
    // A kind this service runs, or one the tenant registered (and did not
    // delete): the retry is made as a submit of it would be.
    let max_attempts = |name: &str| match state.registry.get(name) {
        Some(kind) => Some(store::KindTerms {
            max_attempts: kind.max_attempts(),
            external: false,
        }),
        None => registered
            .iter()
            .find(|kind| kind.name == name && kind.deleted_at.is_none())
            .map(|kind| store::KindTerms {
                max_attempts: kind.max_attempts,
                external: true,
            }),
    };
    // The new job's attempts join this request's trace.
    let traceparent = telemetry::trace::traceparent(&tracing::Span::current());
    let response = execute(
        state,
        tenant_id,
        key,
        request,
        RequestBody::Sent(&[]),
        async |tx| match state
            .store
            .retry_job(
                tx,
                tenant_id,
                job_id,
                &retry_id,
                max_attempts,
                traceparent.as_deref(),
            )
            .await?
        {
            RetryOutcome::Created(job) => accepted(&job),
            RetryOutcome::NotRetryable(job) => Err(ApiError::Conflict {
                detail: format!(
                    "job {job_id} is {}; only a FAILED or CANCELLED job can be retried",
                    job.status.as_str()
                ),
                ids: None,
            }),
            RetryOutcome::UnknownKind(job) => Err(ApiError::Conflict {
                detail: format!(
                    "job {job_id} is of kind {:?}, which this service does not run now",
                    job.kind
                ),
                ids: None,
            }),
            RetryOutcome::NotFound => Err(not_found(job_id)),
        },
    )
    .await?;
    // The new job's outbox row is due now: the relay publishes it (a
    // replayed retry only costs the relay one pass).
    state.signals.outbox_changed();
    Ok(response)
}

/// List jobs, newest first.
#[utoipa::path(
    get, path = "/v1/jobs", tag = "jobs", operation_id = "listJobs",
    params(
        ("status" = Option<JobStatus>, Query),
        ("kind" = Option<String>, Query),
        ("schedule_id" = Option<String>, Query, description = "only the jobs this schedule made; not with status or kind"),
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, body = JobPage),
        (status = 422, description = "a query parameter is not valid; `errors` names it"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn list(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    query: web::Query<HashMap<String, String>>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let status = match query.get("status").map(String::as_str) {
        None | Some("") => None,
        Some(text) => {
            let status = JobStatus::parse(text);
            if status.is_none() {
                errors.push(shared::ledger::FieldError::new(
                    "status",
                    "must be QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED",
                ));
            }
            status
        }
    };
    let (limit, before) = limit_and_cursor(&query, "job_", &mut errors);
    if query.get("kind").is_some_and(|kind| kind.contains('\0')) {
        // No kind has a NUL in its name, and Postgres text cannot hold one.
        errors.push(shared::ledger::FieldError::new(
            "kind",
            "is not the name of a report kind",
        ));
    }
    let schedule_id = query.get("schedule_id").filter(|s| !s.is_empty()).cloned();
    if let Some(schedule_id) = &schedule_id {
        if !super::paging::is_id(schedule_id, "sch_") {
            errors.push(shared::ledger::FieldError::new(
                "schedule_id",
                "is not a schedule id",
            ));
        } else if status.is_some() || query.get("kind").is_some_and(|k| !k.is_empty()) {
            errors.push(shared::ledger::FieldError::new(
                "schedule_id",
                "cannot be combined with status or kind",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the query parameters are not valid".into(),
            errors,
        });
    }
    let filter = JobFilter {
        status,
        kind: query.get("kind").filter(|k| !k.is_empty()).cloned(),
        schedule_id,
        before,
        limit,
    };
    let jobs = state.store.list_jobs(&tenant.0, &filter).await?;
    let (jobs, next_cursor) = cut(jobs, limit, |j| j.job_id.clone());
    Ok(HttpResponse::Ok().json(JobPage {
        data: jobs.iter().map(Job::to_object).collect(),
        next_cursor,
    }))
}
