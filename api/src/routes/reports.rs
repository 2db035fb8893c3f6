use std::{collections::HashMap, time::Duration};

use actix_web::{HttpRequest, HttpResponse, web};
use reports::{AnyReportKind, PERIOD_CLOSE, ParamsError, RawParams, Registry};
use serde_json::Value;
use shared::{
    ids::new_job_id,
    model::{JobObject, Priority},
};
use store::{KindTerms, NewJob, Scope, Submission};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{OneOfBuilder, Ref, RefOr, Schema},
};

use super::jobs::accepted;
use crate::{
    auth::Caller,
    body::json_media_type,
    error::{ApiError, ApiResult},
    idempotency::{IdempotencyKey, RequestBody, canonical_json, execute},
    state::AppState,
    submits,
};

// What depends on the kinds (the body's schemas, the kinds in the path,
// what each does, their refusals in the 409) comes from the registry:
// [`ReportParams`] here, and `crate::openapi`'s modifier of this operation.
/// Submit a report job. The body is the kind's parameters.
#[utoipa::path(
    post, path = "/v1/reports/{kind}", tag = "jobs", operation_id = "submitReport",
    params(
        ("kind" = String, Path),
        ("run_at" = Option<String>, Query, description = "RFC 3339 time with an offset to run the job at (`2026-12-03T06:00:00Z`); a time past runs at once; at most 366 days ahead"),
        ("delay" = Option<u64>, Query, description = "whole seconds to wait before running the job; at most 366 days; not with run_at"),
        ("priority" = Option<Priority>, Query, description = "`high`, `normal` (the default) or `low`: among the tenant's due jobs, higher runs first, a job waiting behind higher ones at most PRIORITY_AGING per step"),
    ),
    request_body(content = ReportParams, description = "the kind's parameters, e.g. {\"month\": \"2026-10\"} for gst-summary"),
    responses(
        (status = 202, description = "accepted; poll the Location", body = JobObject,
         headers(("Location" = String, description = "the job: /v1/jobs/{job_id}"), ("Retry-After" = u64, description = "seconds until polling is worthwhile"))),
        (status = 400, description = "malformed JSON, parameters of the wrong shape (a wrong JSON type, an unknown or missing field), or a malformed Idempotency-Key"),
        (status = 404, description = "unknown report kind"),
        (status = 413, description = "body over 1 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "parameter values that make no sense (`errors` names each field, `run_at`, `delay` and `priority` included), or the Idempotency-Key was used with a different request; nothing stored"),
        (status = 429, description = "over the tenant's request rate or active jobs (MAX_ACTIVE_JOBS); nothing stored"),
        (status = 503, description = "the database or the queue does not answer; nothing stored"),
    ),
    security(("bearer" = ["submit"]))
)]
pub async fn submit(
    caller: Caller,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    kind: web::Path<String>,
    request: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let kind_name = kind.into_inner();
    caller.require(if kind_name == PERIOD_CLOSE {
        Scope::Close
    } else {
        Scope::Submit
    })?;
    let tenant_id = caller.tenant_id.as_str();
    let created_at = shared::time::now_ms();
    let run_after = first_run(&query, created_at)?;
    let priority = priority_of(&query)?;
    let refused = |e| match e {
        ParamsError::Malformed(detail) => {
            ApiError::BadRequest(format!("the parameters do not fit {kind_name}: {detail}"))
        }
        ParamsError::Invalid(errors) => ApiError::Validation {
            detail: format!("the parameters of {kind_name} are not valid"),
            errors,
        },
    };
    let Some(kind) = state.registry.get(&kind_name) else {
        // A kind the tenant registered: checked against its schema, and
        // run by the tenant's workers over HTTP.
        let registered = super::kinds::live_kind(&state, tenant_id, &kind_name)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("there is no report kind {kind_name:?}")))?;
        json_media_type(&request)?;
        let params = state.schemas.accept(&registered, &body).map_err(refused)?;
        let priority = if query.contains_key("priority") {
            priority
        } else {
            registered.priority
        };
        let terms = KindTerms {
            max_attempts: registered.max_attempts,
            external: true,
        };
        let response = make_job(
            &state,
            &key,
            &request,
            tenant_id,
            kind_name.clone(),
            canonical_json(&params),
            terms,
            priority,
            (run_after, created_at),
        )
        .await;
        // Leases waiting in this process look at once.
        state.work.woken.notify_waiters();
        return response;
    };
    json_media_type(&request)?;
    // The body is read once, straight into the kind's schema: what the job
    // keeps, and what the Idempotency-Key's fingerprint reads, is that
    // typed value written as canonical JSON.
    let params: Value = kind.accept(RawParams::Request(&body)).map_err(refused)?;
    let params_text = canonical_json(&params);
    if let Some(reason) = kind.refuse_submit(&state.store, tenant_id, &params).await? {
        // Through the key's layer all the same: a retry of the submit that
        // made the job (which then closed the month) replays its 202, and
        // a new key stores this 409 like any answer of a request that ran.
        let body = RequestBody::Canonical(&params_text);
        return execute(&state, tenant_id, &key, &request, body, async |_| {
            Err(ApiError::Conflict {
                detail: reason,
                ids: None,
            })
        })
        .await;
    }
    let terms = KindTerms {
        max_attempts: kind.max_attempts(),
        external: false,
    };
    make_job(
        &state,
        &key,
        &request,
        tenant_id,
        kind_name,
        params_text,
        terms,
        priority,
        (run_after, created_at),
    )
    .await
}

/// Makes a submit's job of checked parameters, once the tenant's active
/// jobs admit it, through the group commit of submits.
#[allow(clippy::too_many_arguments)]
async fn make_job(
    state: &AppState,
    key: &IdempotencyKey,
    request: &HttpRequest,
    tenant_id: &str,
    kind: String,
    params: String,
    terms: KindTerms,
    priority: Priority,
    (run_after, created_at): (i64, i64),
) -> ApiResult<HttpResponse> {
    state.limits.admit_job(&state.store, tenant_id).await?;
    let new_job = NewJob {
        job_id: new_job_id(),
        tenant_id: tenant_id.to_owned(),
        kind,
        params,
        max_attempts: terms.max_attempts,
        priority,
        external: terms.external,
    };
    let submission = Submission {
        run_after,
        // The request's span: the job's attempts join its trace.
        traceparent: telemetry::trace::traceparent(&tracing::Span::current()),
        ..Submission::at_once(new_job, created_at)
    };
    let answer = accepted(&submission.queued())?;
    submits::submit(state, key, request, submission, answer).await
}

/// How far ahead a submit may ask its job to start.
pub const MAX_RUN_AHEAD: Duration = Duration::from_secs(366 * 24 * 3600);

/// A submit's `priority`: `normal` when it names none. A query that names
/// anything but `run_at`, `delay` and `priority` is refused: a misspelt
/// option must not be dropped silently.
fn priority_of(query: &HashMap<String, String>) -> ApiResult<Priority> {
    if let Some(unknown) = query
        .keys()
        .find(|name| !["run_at", "delay", "priority"].contains(&name.as_str()))
    {
        return Err(ApiError::validation(
            unknown,
            "is not a parameter of a submit (run_at, delay, priority)",
        ));
    }
    query.get("priority").map_or(Ok(Priority::Normal), |text| {
        Priority::parse(text)
            .ok_or_else(|| ApiError::validation("priority", "must be one of high, normal or low"))
    })
}

/// When a submit's job is first due, from its `run_at` or `delay`: now
/// when it names neither, or a time already past.
fn first_run(query: &HashMap<String, String>, now: i64) -> ApiResult<i64> {
    let latest = now.saturating_add(shared::time::duration_ms(MAX_RUN_AHEAD));
    let at = match (query.get("run_at"), query.get("delay")) {
        (None, None) => return Ok(now),
        (Some(_), Some(_)) => {
            return Err(ApiError::validation(
                "delay",
                "cannot be given with run_at: name the start one way",
            ));
        }
        (Some(text), None) => shared::time::parse_rfc3339(text).ok_or_else(|| {
            ApiError::validation(
                "run_at",
                "must be an RFC 3339 time with an offset, such as 2026-12-03T06:00:00Z",
            )
        })?,
        (None, Some(text)) => {
            let seconds = text
                .parse::<u64>()
                .ok()
                .filter(|s| *s <= MAX_RUN_AHEAD.as_secs())
                .ok_or_else(|| {
                    ApiError::validation(
                        "delay",
                        format!(
                            "must be a whole number of seconds, at most {}",
                            MAX_RUN_AHEAD.as_secs()
                        ),
                    )
                })?;
            now.saturating_add(shared::time::duration_ms(Duration::from_secs(seconds)))
        }
    };
    if at > latest {
        return Err(ApiError::validation(
            "run_at",
            "is more than 366 days ahead",
        ));
    }
    Ok(at.max(now))
}

/// The body of `POST /v1/reports/{kind}`: one of the parameter schemas of
/// the registry's kinds (diagnostic ones included), each a closed schema,
/// so exactly one fits a valid body. Each kind's schema comes from the kind
/// itself ([`AnyReportKind::params_schema`]): a kind added to the registry
/// reaches the document with nothing written here.
pub struct ReportParams;

impl PartialSchema for ReportParams {
    fn schema() -> RefOr<Schema> {
        let bodies = bodies(&Registry::all());
        let described = bodies.iter().map(|(name, takers)| {
            let names: Vec<&str> = takers.iter().map(|kind| kind.name()).collect();
            let diagnostic = if takers.iter().all(|kind| kind.diagnostic()) {
                "; diagnostic"
            } else {
                ""
            };
            format!("{} ({name}{diagnostic})", names.join(" and "))
        });
        let mut one_of = OneOfBuilder::new().description(Some(format!(
            "the parameters of the kind named in the path: {}",
            or_list(described)
        )));
        for (name, _) in &bodies {
            one_of = one_of.item(Ref::from_schema_name(name));
        }
        one_of.into()
    }
}

impl ToSchema for ReportParams {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for kind in Registry::all().kinds() {
            schemas.extend(kind.params_schema().schemas);
        }
    }
}

/// The kinds' parameter schemas by name, each once, with the kinds that
/// take it, in the kinds' order.
fn bodies(registry: &Registry) -> Vec<(String, Vec<&'static dyn AnyReportKind>)> {
    let mut bodies: Vec<(String, Vec<&'static dyn AnyReportKind>)> = Vec::new();
    for kind in registry.kinds() {
        let name = kind.params_schema().name;
        match bodies.iter_mut().find(|(taken, _)| *taken == name) {
            Some((_, takers)) => takers.push(kind),
            None => bodies.push((name, vec![kind])),
        }
    }
    bodies
}

/// `a, b, or c`; `a or b`; `a`.
fn or_list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    match items.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [first, second] => format!("{first} or {second}"),
        [rest @ .., last] => format!("{}, or {last}", rest.join(", ")),
    }
}
