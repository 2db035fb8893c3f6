//! Recurring schedules: `/v1/schedules` (`docs/api.md`, Schedules).

use std::collections::HashMap;

use actix_web::{
    HttpRequest, HttpResponse,
    http::{StatusCode, header},
    web,
};
use reports::{PERIOD_CLOSE, ParamsError, RawParams};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use shared::{
    ids::new_id,
    ledger::FieldError,
    model::Priority,
    schedule::{CronSchedule, Misfire, check_template, render},
    time::{now_ms, parse_rfc3339, to_rfc3339},
};
use store::{AuditAction, AuditChange, Schedule, Scope};
use utoipa::ToSchema;

pub use shared::objects::ScheduleObject;

use super::paging::{cut, is_id, limit_and_cursor};
use crate::{
    auth::{Caller, Tenant, scope},
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, RequestBody, execute},
    state::AppState,
};

/// Fires a schedule object shows ahead.
const NEXT_FIRES_SHOWN: usize = 5;

/// A new schedule.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// The report kind each fire submits.
    #[schema(example = "gst-summary")]
    pub kind: String,
    /// The kind's parameters; any value may be `{"$fire": "<name>"}`,
    /// filled from the fire's time (`date`, `previous_date`, `month`,
    /// `previous_month`, `time`).
    #[schema(value_type = Object, example = json!({"month": {"$fire": "previous_month"}}))]
    pub params: Value,
    /// Five fields: minute hour day-of-month month day-of-week.
    #[schema(example = "0 6 1 * *")]
    pub cron: String,
    /// An IANA time zone name the cron expression is read in.
    #[schema(example = "Asia/Kolkata")]
    pub timezone: String,
    /// RFC 3339; no fire before it.
    pub starts_at: Option<String>,
    /// RFC 3339; no fire after it.
    pub ends_at: Option<String>,
    /// `run_once` (default: the latest missed fire makes one job) or
    /// `skip` (missed fires make none).
    pub misfire: Option<String>,
    /// The priority of the jobs it makes: `high`, `normal` (default) or
    /// `low`.
    pub priority: Option<String>,
}

/// A change to a schedule: every member is optional; `starts_at` and
/// `ends_at` may be `null` to remove them.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeSchedule {
    pub kind: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub params: Option<Value>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub starts_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub ends_at: Option<Option<String>>,
    pub misfire: Option<String>,
    pub priority: Option<String>,
}

/// A member that is present, null or not: absent stays `None`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// A schedule as the API shows it, with its next fires.
pub fn schedule_object(schedule: &Schedule) -> ScheduleObject {
    let next_fires = match (schedule.paused, schedule.next_fire_at) {
        (false, Some(next)) => {
            let mut fires = vec![next];
            if let Ok(cron) = CronSchedule::parse(&schedule.cron, &schedule.timezone) {
                fires.extend(cron.upcoming(next, schedule.ends_at, NEXT_FIRES_SHOWN - 1));
            }
            fires.into_iter().map(to_rfc3339).collect()
        }
        _ => Vec::new(),
    };
    ScheduleObject {
        schedule_id: schedule.schedule_id.clone(),
        kind: schedule.kind.clone(),
        params: serde_json::from_str(&schedule.params).unwrap_or(Value::Null),
        cron: schedule.cron.clone(),
        timezone: schedule.timezone.clone(),
        starts_at: schedule.starts_at.map(to_rfc3339),
        ends_at: schedule.ends_at.map(to_rfc3339),
        misfire: schedule.misfire.as_str().to_owned(),
        priority: schedule.priority,
        paused: schedule.paused,
        next_fires,
        last_fire_at: schedule.last_fire_at.map(to_rfc3339),
        created_at: to_rfc3339(schedule.created_at),
        updated_at: to_rfc3339(schedule.updated_at),
    }
}

#[derive(Serialize, ToSchema)]
pub struct SchedulePage {
    pub data: Vec<ScheduleObject>,
    pub next_cursor: Option<String>,
}

fn not_found(schedule_id: &str) -> ApiError {
    ApiError::NotFound(format!("there is no schedule {schedule_id}"))
}

/// The first fire of `cron` after `now`, not before `starts_at` nor after
/// `ends_at`.
fn first_fire(
    cron: &CronSchedule,
    starts_at: Option<i64>,
    ends_at: Option<i64>,
    now: i64,
) -> Option<i64> {
    let from = starts_at.map_or(now, |start| now.max(start - 1));
    cron.next_after(from)
        .filter(|fire| ends_at.is_none_or(|end| *fire <= end))
}

/// A schedule's kind: one this service runs, or one the tenant
/// registered (and did not delete).
enum ScheduledKind<'a> {
    BuiltIn(&'static dyn reports::AnyReportKind),
    Registered(&'a store::RegisteredKind),
}

/// Checks every value of `schedule` (its template against its kind, as
/// the first fire fills it in) and gives its next fire from `now`.
/// `registered` are the tenant's registered kinds.
fn check(
    state: &AppState,
    schedule: &mut Schedule,
    now: i64,
    registered: &[store::RegisteredKind],
) -> ApiResult<()> {
    let mut errors = Vec::new();
    let kind = match state.registry.get(&schedule.kind) {
        Some(kind) => Some(ScheduledKind::BuiltIn(kind)),
        None => registered
            .iter()
            .find(|kind| kind.name == schedule.kind && kind.deleted_at.is_none())
            .map(ScheduledKind::Registered),
    };
    if kind.is_none() {
        errors.push(FieldError::new(
            "kind",
            format!("there is no report kind {:?}", schedule.kind),
        ));
    }
    let cron = CronSchedule::parse(&schedule.cron, &schedule.timezone)
        .map_err(|refused| errors.extend(refused))
        .ok();
    if let (Some(start), Some(end)) = (schedule.starts_at, schedule.ends_at)
        && end <= start
    {
        errors.push(FieldError::new("ends_at", "must be after starts_at"));
    }
    if schedule.ends_at.is_some_and(|end| end <= now) {
        errors.push(FieldError::new("ends_at", "is already past"));
    }
    let template: Value = serde_json::from_str(&schedule.params).unwrap_or(Value::Null);
    if !template.is_object() {
        errors.push(FieldError::new("params", "must be a JSON object"));
    }
    let template_errors = check_template(&template);
    let template_ok = template_errors.is_empty();
    errors.extend(template_errors);
    if let (Some(kind), Some(cron), true, true) = (kind, &cron, template_ok, template.is_object()) {
        let fire = first_fire(cron, schedule.starts_at, schedule.ends_at, now).unwrap_or(now);
        let params = render(&template, fire, cron.zone());
        let accepted = match kind {
            ScheduledKind::BuiltIn(kind) => kind.accept(RawParams::Stored(&params)).map(drop),
            ScheduledKind::Registered(kind) => state
                .schemas
                .accept(kind, params.to_string().as_bytes())
                .map(drop),
        };
        match accepted {
            Ok(()) => {}
            Err(ParamsError::Malformed(detail)) => errors.push(FieldError::new(
                "params",
                format!(
                    "as its first fire fills it in, it does not fit {}: {detail}",
                    schedule.kind
                ),
            )),
            Err(ParamsError::Invalid(invalid)) => errors.extend(invalid.into_iter().map(|e| {
                FieldError::new(
                    format!("params.{}", e.field),
                    format!("as its first fire fills it in: {}", e.message),
                )
            })),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the schedule is not valid".into(),
            errors,
        });
    }
    if let Some(cron) = cron {
        schedule.next_fire_at = first_fire(&cron, schedule.starts_at, schedule.ends_at, now);
    }
    Ok(())
}

/// An RFC 3339 member, or a field error naming it.
fn moment(field: &str, text: Option<&str>, errors: &mut Vec<FieldError>) -> Option<i64> {
    let text = text?;
    let at = parse_rfc3339(text);
    if at.is_none() {
        errors.push(FieldError::new(
            field,
            "must be an RFC 3339 time with an offset, such as 2027-01-01T00:00:00Z",
        ));
    }
    at
}

fn misfire_of(text: Option<&str>, errors: &mut Vec<FieldError>) -> Misfire {
    match text {
        None => Misfire::RunOnce,
        Some(text) => Misfire::parse(text).unwrap_or_else(|| {
            errors.push(FieldError::new("misfire", "must be run_once or skip"));
            Misfire::RunOnce
        }),
    }
}

fn priority_of(text: Option<&str>, errors: &mut Vec<FieldError>) -> Priority {
    match text {
        None => Priority::Normal,
        Some(text) => Priority::parse(text).unwrap_or_else(|| {
            errors.push(FieldError::new("priority", "must be high, normal or low"));
            Priority::Normal
        }),
    }
}

fn refuse_if_any(errors: Vec<FieldError>) -> ApiResult<()> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation {
            detail: "the schedule is not valid".into(),
            errors,
        })
    }
}

fn answer(status: StatusCode, schedule: &Schedule) -> ApiResult<Answer> {
    let headers = if status == StatusCode::CREATED {
        vec![(
            header::LOCATION.to_string(),
            format!("/v1/schedules/{}", schedule.schedule_id),
        )]
    } else {
        Vec::new()
    };
    Answer::json(status, &schedule_object(schedule), headers)
}

/// Create a schedule.
#[utoipa::path(
    post, path = "/v1/schedules", tag = "schedules", operation_id = "createSchedule",
    request_body = CreateSchedule,
    responses(
        (status = 201, body = ScheduleObject, headers(("Location" = String, description = "the schedule: /v1/schedules/{schedule_id}"))),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown field, or a malformed Idempotency-Key"),
        (status = 413, description = "body over 64 KiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "an unknown kind, a bad cron expression, time zone, time or template, or params the kind refuses as the first fire fills them in (`errors` names each); or the Idempotency-Key was used with a different request"),
        (status = 429, description = "over the tenant's request rate or its schedules (MAX_SCHEDULES)"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn create(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let create: CreateSchedule = json_body(&request, &body)?;
    let now = now_ms();
    let mut errors = Vec::new();
    let starts_at = moment("starts_at", create.starts_at.as_deref(), &mut errors);
    let ends_at = moment("ends_at", create.ends_at.as_deref(), &mut errors);
    let misfire = misfire_of(create.misfire.as_deref(), &mut errors);
    let priority = priority_of(create.priority.as_deref(), &mut errors);
    refuse_if_any(errors)?;
    let mut schedule = Schedule {
        schedule_id: new_id("sch_"),
        tenant_id: tenant.0.clone(),
        kind: create.kind,
        params: create.params.to_string(),
        cron: create.cron,
        timezone: create.timezone,
        starts_at,
        ends_at,
        misfire,
        priority,
        paused: false,
        next_fire_at: None,
        last_fire_at: None,
        created_at: now,
        updated_at: now,
    };
    if schedule.kind == PERIOD_CLOSE {
        // Its fires close months: a key that may not close one may not
        // schedule that either.
        tenant.caller().require(Scope::Close)?;
    }
    let registered = state.store.registered_kinds(&tenant.0).await?;
    check(&state, &mut schedule, now, &registered)?;
    let actor = tenant.actor();
    execute(
        &state,
        &tenant.0,
        &key,
        &request,
        RequestBody::Sent(&body),
        async |tx| {
            let count = state.store.count_schedules(tx, &tenant.0).await?;
            state.limits.admit_schedule(count)?;
            state.store.create_schedule(tx, &schedule).await?;
            let change = AuditChange {
                tenant_id: Some(&schedule.tenant_id),
                action: AuditAction::ScheduleCreated,
                target: Some(&schedule.schedule_id),
                details: serde_json::json!({
                    "kind": schedule.kind,
                    "cron": schedule.cron,
                    "timezone": schedule.timezone,
                }),
            };
            state.store.audit(tx, &actor, &change).await?;
            answer(StatusCode::CREATED, &schedule)
        },
    )
    .await
}

/// List schedules, newest first.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "schedules", operation_id = "listSchedules",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, body = SchedulePage),
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
    let (limit, cursor) = limit_and_cursor(&query, "sch_", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation {
            detail: "the query parameters are not valid".into(),
            errors,
        });
    }
    let schedules = state
        .store
        .list_schedules(&tenant.0, cursor.as_deref(), limit)
        .await?;
    let (schedules, next_cursor) = cut(schedules, limit, |s| s.schedule_id.clone());
    Ok(HttpResponse::Ok().json(SchedulePage {
        data: schedules.iter().map(schedule_object).collect(),
        next_cursor,
    }))
}

/// Get a schedule, with its next fires.
#[utoipa::path(
    get, path = "/v1/schedules/{schedule_id}", tag = "schedules", operation_id = "getSchedule",
    params(("schedule_id" = String, Path)),
    responses(
        (status = 200, body = ScheduleObject),
        (status = 404, description = "no schedule of this tenant has this id"),
    ),
    security(("bearer" = ["read"]))
)]
pub async fn get(
    tenant: Tenant<scope::Read>,
    state: web::Data<AppState>,
    schedule_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if !is_id(&schedule_id, "sch_") {
        return Err(not_found(&schedule_id));
    }
    let schedule = state
        .store
        .get_schedule(&tenant.0, &schedule_id)
        .await?
        .ok_or_else(|| not_found(&schedule_id))?;
    Ok(HttpResponse::Ok().json(schedule_object(&schedule)))
}

/// What a change does to a schedule.
pub enum Change {
    Edit(Box<Edit>),
    Pause,
    Resume,
}

/// A `PATCH`'s members, with its times and policy read.
pub struct Edit {
    given: ChangeSchedule,
    starts_at: Option<Option<i64>>,
    ends_at: Option<Option<i64>>,
    misfire: Option<Misfire>,
    priority: Option<Priority>,
}

impl Edit {
    /// Reads the times and the policy, or refuses them by field.
    fn read(given: ChangeSchedule) -> ApiResult<Self> {
        let mut errors = Vec::new();
        let starts_at = given
            .starts_at
            .as_ref()
            .map(|at| moment("starts_at", at.as_deref(), &mut errors));
        let ends_at = given
            .ends_at
            .as_ref()
            .map(|at| moment("ends_at", at.as_deref(), &mut errors));
        let misfire = given
            .misfire
            .as_deref()
            .map(|text| misfire_of(Some(text), &mut errors));
        let priority = given
            .priority
            .as_deref()
            .map(|text| priority_of(Some(text), &mut errors));
        refuse_if_any(errors)?;
        Ok(Edit {
            given,
            starts_at,
            ends_at,
            misfire,
            priority,
        })
    }

    /// Whether it changes when the schedule fires.
    fn moves_fires(&self) -> bool {
        self.given.cron.is_some()
            || self.given.timezone.is_some()
            || self.starts_at.is_some()
            || self.ends_at.is_some()
    }

    /// Writes the members given over `schedule`, checked as a new
    /// schedule's are.
    fn apply(
        &self,
        state: &AppState,
        schedule: &mut Schedule,
        now: i64,
        registered: &[store::RegisteredKind],
    ) -> ApiResult<()> {
        let kept_next = schedule.next_fire_at;
        if let Some(kind) = &self.given.kind {
            schedule.kind.clone_from(kind);
        }
        if let Some(params) = &self.given.params {
            schedule.params = params.to_string();
        }
        if let Some(cron) = &self.given.cron {
            schedule.cron.clone_from(cron);
        }
        if let Some(timezone) = &self.given.timezone {
            schedule.timezone.clone_from(timezone);
        }
        if let Some(starts_at) = self.starts_at {
            schedule.starts_at = starts_at;
        }
        if let Some(ends_at) = self.ends_at {
            schedule.ends_at = ends_at;
        }
        if let Some(misfire) = self.misfire {
            schedule.misfire = misfire;
        }
        if let Some(priority) = self.priority {
            schedule.priority = priority;
        }
        check(state, schedule, now, registered)?;
        // Only a change of its timing moves the next fire: one due now is
        // still made.
        if !self.moves_fires() {
            schedule.next_fire_at = kept_next;
        }
        Ok(())
    }
}

/// Applies `change` to the schedule under its lock, through the
/// `Idempotency-Key` steps: the API's and the dashboard's.
pub async fn change_schedule(
    state: &AppState,
    key: &IdempotencyKey,
    request: &HttpRequest,
    body: &[u8],
    schedule_id: &str,
    change: Change,
    caller: &Caller,
) -> ApiResult<HttpResponse> {
    let tenant_id = caller.tenant_id.as_str();
    if !is_id(schedule_id, "sch_") {
        return Err(not_found(schedule_id));
    }
    let registered = state.store.registered_kinds(tenant_id).await?;
    execute(
        state,
        tenant_id,
        key,
        request,
        RequestBody::Sent(body),
        async |tx| {
            let mut schedule = state
                .store
                .lock_schedule(tx, tenant_id, schedule_id)
                .await?
                .ok_or_else(|| not_found(schedule_id))?;
            let now = now_ms();
            let action = match &change {
                Change::Edit(_) => AuditAction::ScheduleChanged,
                Change::Pause => AuditAction::SchedulePaused,
                Change::Resume => AuditAction::ScheduleResumed,
            };
            match &change {
                Change::Edit(edit) => {
                    edit.apply(state, &mut schedule, now, &registered)?;
                    if schedule.kind == PERIOD_CLOSE {
                        caller.require(Scope::Close)?;
                    }
                }
                Change::Pause => schedule.paused = true,
                Change::Resume => {
                    if schedule.paused {
                        schedule.paused = false;
                        // Fires while paused are not missed: it goes on from now.
                        let cron = CronSchedule::parse(&schedule.cron, &schedule.timezone)
                            .map_err(|errors| ApiError::Validation {
                                detail: "the stored schedule no longer parses".into(),
                                errors,
                            })?;
                        schedule.next_fire_at =
                            first_fire(&cron, schedule.starts_at, schedule.ends_at, now);
                    }
                }
            }
            schedule.updated_at = now;
            if !state.store.replace_schedule(tx, &schedule).await? {
                return Err(not_found(schedule_id));
            }
            let audited = AuditChange {
                tenant_id: Some(tenant_id),
                action,
                target: Some(schedule_id),
                details: serde_json::json!({
                    "kind": schedule.kind,
                    "cron": schedule.cron,
                    "timezone": schedule.timezone,
                    "paused": schedule.paused,
                }),
            };
            state.store.audit(tx, &caller.actor(), &audited).await?;
            answer(StatusCode::OK, &schedule)
        },
    )
    .await
}

/// Change a schedule: the members given replace the stored ones, checked
/// as a new schedule's are. A change of its timing (cron, timezone,
/// starts_at, ends_at) moves its next fire.
#[utoipa::path(
    patch, path = "/v1/schedules/{schedule_id}", tag = "schedules", operation_id = "changeSchedule",
    params(("schedule_id" = String, Path)),
    request_body = ChangeSchedule,
    responses(
        (status = 200, body = ScheduleObject),
        (status = 400, description = "malformed JSON, a wrong JSON type or an unknown field"),
        (status = 404, description = "no schedule of this tenant has this id"),
        (status = 413, description = "body over 64 KiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "a value is not valid, as for a create"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn change(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    schedule_id: web::Path<String>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    // Its times and policy are read before anything is locked.
    let edit = Edit::read(json_body(&request, &body)?)?;
    change_schedule(
        &state,
        &key,
        &request,
        &body,
        &schedule_id,
        Change::Edit(Box::new(edit)),
        tenant.caller(),
    )
    .await
}

/// Pause a schedule: it makes no job until resumed.
#[utoipa::path(
    post, path = "/v1/schedules/{schedule_id}/pause", tag = "schedules", operation_id = "pauseSchedule",
    params(("schedule_id" = String, Path)),
    responses(
        (status = 200, body = ScheduleObject),
        (status = 404, description = "no schedule of this tenant has this id"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn pause(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    schedule_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    change_schedule(
        &state,
        &key,
        &request,
        &[],
        &schedule_id,
        Change::Pause,
        tenant.caller(),
    )
    .await
}

/// Resume a paused schedule from its first fire after now.
#[utoipa::path(
    post, path = "/v1/schedules/{schedule_id}/resume", tag = "schedules", operation_id = "resumeSchedule",
    params(("schedule_id" = String, Path)),
    responses(
        (status = 200, body = ScheduleObject),
        (status = 404, description = "no schedule of this tenant has this id"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn resume(
    tenant: Tenant<scope::Manage>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    schedule_id: web::Path<String>,
    request: HttpRequest,
) -> ApiResult<HttpResponse> {
    change_schedule(
        &state,
        &key,
        &request,
        &[],
        &schedule_id,
        Change::Resume,
        tenant.caller(),
    )
    .await
}

/// Delete a schedule; the jobs it made stay.
#[utoipa::path(
    delete, path = "/v1/schedules/{schedule_id}", tag = "schedules", operation_id = "deleteSchedule",
    params(("schedule_id" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, description = "no schedule of this tenant has this id"),
    ),
    security(("bearer" = ["manage"]))
)]
pub async fn delete(
    tenant: Tenant<scope::Manage>,
    state: web::Data<AppState>,
    schedule_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if !is_id(&schedule_id, "sch_")
        || !state
            .store
            .delete_schedule(&tenant.0, &schedule_id, &tenant.actor())
            .await?
    {
        return Err(not_found(&schedule_id));
    }
    Ok(HttpResponse::NoContent().finish())
}
