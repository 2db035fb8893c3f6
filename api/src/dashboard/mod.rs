//! The web dashboard at `/dashboard`: server-rendered pages (maud), with
//! its stylesheet and a little script compiled into the binary; nothing is
//! fetched from anywhere else.
//!
//! A person signs in with one of their tenant's API keys and gets a
//! session cookie (HttpOnly, SameSite=Strict, Path=/dashboard, Secure over
//! https). The session lasts [`SESSION_TTL`] and only while the key it was
//! opened with stays valid: every request checks the key in the in-memory
//! set that `api keys revoke` empties within a second. The cookie's token
//! names its key and carries a tag keyed by that key's hash, checked in
//! memory before the session is read, so a made-up cookie costs no query.
//! Sign-ins count against `RATE_LIMIT` by client address, then by tenant. Every form carries
//! the session's CSRF token, checked on each POST, besides the cookie's
//! SameSite=Strict and an Origin check. Actions go through the same code
//! as the API's (`routes::jobs::retry_job`, ...), idempotency included:
//! each form carries an Idempotency-Key, so a form sent twice acts once.

mod pages;

use std::{collections::HashMap, time::Duration};

use actix_web::{
    HttpRequest, HttpResponse, ResponseError,
    cookie::{Cookie, SameSite, time::Duration as CookieDuration},
    http::{StatusCode, header},
    web,
};
use shared::{model::JobStatus, time::now_ms};
use store::{JobFilter, Scope, TokenCheck, hash_key};

use crate::{
    auth::Caller,
    error::ApiError,
    idempotency::{IdempotencyKey, parse_key},
    request_id,
    routes::{
        jobs::{cancel_job, is_job_id, job_result, retry_job},
        paging::{cut, is_id, limit_and_cursor},
        schedules::{Change, change_schedule, schedule_object},
        webhooks::{WebhookChange, change_webhook},
    },
    state::AppState,
};

/// How long a session lasts after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

const COOKIE: &str = "receipt_session";
const PATH: &str = "/dashboard";
const STYLE: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");

/// Pages allow only this server's own stylesheet, script and forms.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// Registers the dashboard's routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope(PATH)
            .app_data(web::PayloadConfig::new(64 * 1024))
            .service(web::resource("").get(overview))
            .service(web::resource("/").get(overview))
            .service(web::resource("/overview").get(overview_fragment))
            .service(web::resource("/sign-in").get(sign_in_page).post(sign_in))
            .service(web::resource("/sign-out").post(sign_out))
            .service(web::resource("/jobs").get(jobs))
            .service(web::resource("/jobs/{job_id}").get(job))
            .service(web::resource("/jobs/{job_id}/live").get(job_fragment))
            .service(web::resource("/jobs/{job_id}/result").get(job_download))
            .service(web::resource("/jobs/{job_id}/cancel").post(job_cancel))
            .service(web::resource("/jobs/{job_id}/retry").post(job_retry))
            .service(web::resource("/kinds").get(kinds))
            .service(web::resource("/keys").get(keys))
            .service(web::resource("/audit").get(audit))
            .service(web::resource("/schedules").get(schedules))
            .service(web::resource("/schedules/{schedule_id}").get(schedule))
            .service(web::resource("/schedules/{schedule_id}/pause").post(schedule_pause))
            .service(web::resource("/schedules/{schedule_id}/resume").post(schedule_resume))
            .service(web::resource("/webhooks").get(webhooks))
            .service(web::resource("/webhooks/{webhook_id}").get(webhook))
            .service(web::resource("/webhooks/{webhook_id}/enable").post(webhook_enable))
            .service(web::resource("/webhooks/{webhook_id}/rotate-secret").post(webhook_rotate))
            .service(web::resource("/assets/dashboard.css").get(style))
            .service(web::resource("/assets/dashboard.js").get(script)),
    );
}

/// A signed-in person: their key's tenant and rights, and their
/// session's CSRF token.
pub struct Viewer {
    pub csrf_token: String,
    /// The key the session was opened with, as the API would see it: an
    /// action the key may not take is refused here as there.
    pub caller: Caller,
}

impl Viewer {
    /// Whether the session's key holds `scope`: what the pages offer.
    pub fn may(&self, scope: Scope) -> bool {
        self.caller.scope.allows(scope)
    }
}

/// Why a request gets no page of its own: what it gets instead.
enum Refusal {
    /// Not signed in, or the session ended: to the sign-in page, saying why.
    SignIn(Option<&'static str>),
    /// A page of its own with this status and message.
    Page(StatusCode, String),
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Self {
        Refusal::Page(error.status_code(), message_of(&error))
    }
}

/// What a person is told of an error: a 500's cause is logged, not shown.
fn message_of(error: &ApiError) -> String {
    match error {
        ApiError::Internal(cause) => {
            tracing::error!(cause, "internal error");
            "Something went wrong on the server; it has been logged. Try again.".to_owned()
        }
        other => capitalised(&other.to_string()),
    }
}

impl From<store::Error> for Refusal {
    fn from(error: store::Error) -> Self {
        ApiError::from(error).into()
    }
}

type PageResult = Result<HttpResponse, Refusal>;

/// Runs a page handler and turns its refusal into a page.
async fn respond(
    state: &AppState,
    request: &HttpRequest,
    page: impl AsyncFnOnce(&Viewer) -> PageResult,
) -> HttpResponse {
    let answer = match viewer(state, request).await {
        Ok(viewer) => match page(&viewer).await {
            Ok(response) => Ok(response),
            Err(refusal) => Err((refusal, Some(viewer))),
        },
        Err(refusal) => Err((refusal, None)),
    };
    let response = match answer {
        Ok(response) => response,
        Err((Refusal::SignIn(reason), _)) => to_sign_in(request, reason),
        Err((Refusal::Page(status, message), viewer)) => {
            html(status, pages::message(viewer.as_ref(), status, &message))
        }
    };
    secured(response)
}

/// The session of the request's cookie, if it is still good.
async fn viewer(state: &AppState, request: &HttpRequest) -> Result<Viewer, Refusal> {
    let Some(token) = request.cookie(COOKIE).map(|c| c.value().to_owned()) else {
        return Err(Refusal::SignIn(None));
    };
    // Checked in memory first, as a bearer key is: a made-up cookie costs
    // no query.
    match state.keys.check_session_token(&token) {
        TokenCheck::Issued => {}
        // Its session row goes with the expired ones, at a later sign-in.
        TokenCheck::NoKey => return Err(Refusal::SignIn(Some("revoked"))),
        TokenCheck::Invalid => return Err(Refusal::SignIn(Some("expired"))),
    }
    let Some(session) = state.store.dashboard_session(&token).await? else {
        return Err(Refusal::SignIn(Some("expired")));
    };
    // The key it was opened with must still be valid, and the tenant's.
    let Some(holder) = state
        .keys
        .holder_of_hash(&session.key_hash)
        .filter(|holder| holder.tenant_id == session.tenant_id && holder.scope.allows(Scope::Read))
    else {
        state.store.delete_dashboard_session(&token).await?;
        return Err(Refusal::SignIn(Some("revoked")));
    };
    state.limits.request(&session.tenant_id)?;
    Ok(Viewer {
        csrf_token: session.csrf_token,
        caller: Caller {
            tenant_id: holder.tenant_id,
            key_id: holder.key_id,
            scope: holder.scope,
            request_id: request_id::of(request),
        },
    })
}

/// A page request goes to the sign-in page; a script's request for a part
/// of a page gets 401, and the script reloads the page.
fn to_sign_in(request: &HttpRequest, reason: Option<&'static str>) -> HttpResponse {
    if request.headers().contains_key("x-dashboard-fragment") {
        return HttpResponse::Unauthorized().finish();
    }
    if request.method() == actix_web::http::Method::POST {
        // A form sent from a page whose session has ended: say so here,
        // rather than act on it or lose the reason in a redirect.
        return html(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(Some(reason_text(reason.unwrap_or("expired"))), ""),
        );
    }
    let location = match reason {
        Some(reason) => format!("{PATH}/sign-in?reason={reason}"),
        None => format!("{PATH}/sign-in"),
    };
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

fn reason_text(reason: &str) -> &'static str {
    match reason {
        "revoked" => {
            "The API key this session was opened with is no longer valid. Sign in with a valid key."
        }
        "signed-out" => "You are signed out.",
        _ => "Your session has expired. Sign in again.",
    }
}

fn html(status: StatusCode, markup: maud::Markup) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

/// The headers every dashboard answer carries.
fn secured(mut response: HttpResponse) -> HttpResponse {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not no-referrer: with it a browser sends `Origin: null` on a
        // form's POST, and the origin check below could not tell.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, header::HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
    }
    response
}

/// The query string's parameters; a malformed one is read as best it can.
fn query_of(request: &HttpRequest) -> HashMap<String, String> {
    url::form_urlencoded::parse(request.query_string().as_bytes())
        .into_owned()
        .collect()
}

/// An `application/x-www-form-urlencoded` body's fields.
fn form_of(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// Whether a POST came from a page of this server: the CSRF token of the
/// session, and, when the browser names it, this server's own origin.
fn check_form(
    request: &HttpRequest,
    viewer: &Viewer,
    form: &HashMap<String, String>,
) -> Result<(), Refusal> {
    if !same_origin(request) {
        return Err(Refusal::Page(
            StatusCode::FORBIDDEN,
            "This form was sent from another site, so nothing was done.".into(),
        ));
    }
    let sent = form.get("csrf_token").map(String::as_str).unwrap_or("");
    // Compared as hashes, so the time taken says nothing of the token.
    if hash_key(sent) != hash_key(&viewer.csrf_token) {
        return Err(Refusal::Page(
            StatusCode::FORBIDDEN,
            "This form has expired (it belongs to an earlier session), so nothing was done. \
             Reload the page and try again."
                .into(),
        ));
    }
    Ok(())
}

fn same_origin(request: &HttpRequest) -> bool {
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return true;
    };
    let info = request.connection_info();
    origin.to_str().ok() == Some(&format!("{}://{}", info.scheme(), info.host()))
}

/// The form's Idempotency-Key: each rendered form has a fresh one.
fn form_key(form: &HashMap<String, String>) -> Result<IdempotencyKey, Refusal> {
    let key = form
        .get("idempotency_key")
        .map(String::as_str)
        .unwrap_or("");
    parse_key(key.as_bytes())
        .map(|key| IdempotencyKey(Some(key)))
        .map_err(|_| {
            Refusal::Page(
                StatusCode::BAD_REQUEST,
                "This form is incomplete (it has no valid action key). Reload the page and try again."
                    .into(),
            )
        })
}

/// The status and JSON body of an answer made by an API handler.
async fn read_answer(response: HttpResponse) -> Result<(StatusCode, serde_json::Value), Refusal> {
    let status = response.status();
    let body = actix_web::body::to_bytes(response.into_body())
        .await
        .map_err(|e| ApiError::Internal(format!("reading an answer: {e}")))?;
    let value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Ok((status, value))
}

/// A 303 to another dashboard page, after a form did its work.
fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

/// A form's action: checks the form, runs the API's code for it (`act`)
/// with the form's Idempotency-Key, and answers with `then` of its answer,
/// or with a page saying why it was refused.
async fn form_action(
    state: &AppState,
    request: &HttpRequest,
    body: &[u8],
    needed: Scope,
    act: impl AsyncFnOnce(&Caller, &IdempotencyKey) -> Result<HttpResponse, ApiError>,
    then: impl AsyncFnOnce(&Viewer, serde_json::Value) -> PageResult,
) -> HttpResponse {
    respond(state, request, async |viewer| {
        let form = form_of(body);
        check_form(request, viewer, &form)?;
        viewer.caller.require(needed)?;
        let key = form_key(&form)?;
        match read_answer(act(&viewer.caller, &key).await?).await? {
            (status, answer) if status.is_success() => then(viewer, answer).await,
            (status, answer) => Err(refused(status, &answer)),
        }
    })
    .await
}

/// An API answer that is an error, as a page.
fn refused(status: StatusCode, answer: &serde_json::Value) -> Refusal {
    let detail = answer["detail"]
        .as_str()
        .unwrap_or("the action was refused")
        .to_owned();
    Refusal::Page(status, capitalised(&detail))
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

async fn style() -> HttpResponse {
    asset("text/css; charset=utf-8", STYLE)
}

async fn script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    secured(
        HttpResponse::Ok()
            .content_type(content_type)
            .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
            .body(body),
    )
}

async fn sign_in_page(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    if viewer(&state, &request).await.is_ok() {
        return secured(see_other(PATH.to_owned()));
    }
    let query = query_of(&request);
    let notice = query.get("reason").map(|r| reason_text(r));
    secured(html(StatusCode::OK, pages::sign_in(notice, "")))
}

async fn sign_in(
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let form = form_of(&body);
    let key = form.get("api_key").map(|k| k.trim()).unwrap_or("");
    if !same_origin(&request) {
        let page = pages::sign_in(None, "This form was sent from another site.");
        return secured(html(StatusCode::FORBIDDEN, page));
    }
    // Limited by address before the key is known, and by tenant after: a
    // flood of sign-ins opens no more sessions than the rate allows.
    if let Some(from) = request.peer_addr().map(|a| a.ip())
        && let Err(error) = state.limits.sign_in(from)
    {
        return too_many_sign_ins(&error);
    }
    // Checked in memory, like a bearer key: a wrong key costs no query.
    let Some(holder) = (!key.is_empty()).then(|| state.keys.holder(key)).flatten() else {
        let page = pages::sign_in(None, "That API key is not valid.");
        return secured(html(StatusCode::UNAUTHORIZED, page));
    };
    if !holder.scope.allows(Scope::Read) {
        let page = pages::sign_in(
            None,
            "That API key cannot open the dashboard: it needs the read scope.",
        );
        return secured(html(StatusCode::FORBIDDEN, page));
    }
    let (key_id, tenant_id) = (holder.key_id, holder.tenant_id);
    if let Err(error) = state.limits.request(&tenant_id) {
        return too_many_sign_ins(&error);
    }
    let ttl = shared::time::duration_ms(SESSION_TTL);
    let session = match state
        .store
        .create_dashboard_session(&tenant_id, &key_id, &hash_key(key), ttl)
        .await
    {
        Ok(session) => session,
        Err(error) => {
            let error = ApiError::from(error);
            let page = pages::sign_in(None, &message_of(&error));
            return secured(html(error.status_code(), page));
        }
    };
    let secure = request.connection_info().scheme() == "https";
    let cookie = Cookie::build(COOKIE, session.token)
        .path(PATH)
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Strict)
        .max_age(CookieDuration::seconds(
            i64::try_from(SESSION_TTL.as_secs()).unwrap_or(i64::MAX),
        ))
        .finish();
    secured(
        HttpResponse::SeeOther()
            .cookie(cookie)
            .insert_header((header::LOCATION, PATH))
            .finish(),
    )
}

/// The sign-in page again, with 429 and `Retry-After`.
fn too_many_sign_ins(error: &ApiError) -> HttpResponse {
    let mut response = html(
        StatusCode::TOO_MANY_REQUESTS,
        pages::sign_in(None, &message_of(error)),
    );
    if let ApiError::TooManyRequests {
        retry_after_secs, ..
    } = error
        && let Ok(value) = header::HeaderValue::from_str(&retry_after_secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    secured(response)
}

async fn sign_out(
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        check_form(&request, viewer, &form_of(&body))?;
        if let Some(cookie) = request.cookie(COOKIE) {
            state.store.delete_dashboard_session(cookie.value()).await?;
        }
        let mut gone = Cookie::build(COOKIE, "").path(PATH).finish();
        gone.make_removal();
        Ok(HttpResponse::SeeOther()
            .cookie(gone)
            .insert_header((
                header::LOCATION,
                format!("{PATH}/sign-in?reason=signed-out"),
            ))
            .finish())
    })
    .await
}

/// The overview's figures, read for one tenant.
async fn overview_figures(state: &AppState, tenant_id: &str) -> Result<pages::Overview, Refusal> {
    Ok(pages::Overview {
        counts: state.store.job_counts(tenant_id).await?,
        throughput: state.store.throughput(tenant_id, 60).await?,
        now: now_ms(),
    })
}

async fn overview(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let figures = overview_figures(&state, &viewer.caller.tenant_id).await?;
        Ok(html(StatusCode::OK, pages::overview(viewer, &figures)))
    })
    .await
}

async fn overview_fragment(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let figures = overview_figures(&state, &viewer.caller.tenant_id).await?;
        Ok(html(StatusCode::OK, pages::overview_panel(&figures)))
    })
    .await
}

async fn jobs(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let query = query_of(&request);
        let kinds: Vec<&str> = state.registry.names().collect();
        let mut problems = Vec::new();
        let status_text = query.get("status").map(String::as_str).unwrap_or("");
        let status = JobStatus::parse(status_text);
        if !status_text.is_empty() && status.is_none() {
            problems.push(format!(
                "There is no status {status_text:?}: choose QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED."
            ));
        }
        let kind = query.get("kind").filter(|k| !k.is_empty()).cloned();
        if let Some(kind) = &kind
            && !kinds.contains(&kind.as_str())
        {
            problems.push(format!(
                "There is no kind {kind:?}: choose one of {}.",
                kinds.join(", ")
            ));
        }
        let mut errors = Vec::new();
        let (limit, before) = limit_and_cursor(&query, "job_", &mut errors);
        for error in errors {
            problems.push(match error.field.as_str() {
                "cursor" => "That page link is not valid (its cursor was not made here). \
                             Start again from the first page."
                    .to_owned(),
                _ => format!("{} {}.", capitalised(&error.field), error.message),
            });
        }
        let filters = pages::JobFilters {
            status: status_text.to_owned(),
            kind: kind.clone().unwrap_or_default(),
            kinds,
        };
        if !problems.is_empty() {
            let page = pages::jobs(viewer, &filters, &[], None, &problems);
            return Ok(html(StatusCode::BAD_REQUEST, page));
        }
        let filter = JobFilter {
            status,
            kind,
            schedule_id: None,
            before,
            limit,
        };
        let found = state.store.list_jobs(&viewer.caller.tenant_id, &filter).await?;
        let (found, next_cursor) = cut(found, limit, |j| j.job_id.clone());
        let page = pages::jobs(viewer, &filters, &found, next_cursor.as_deref(), &[]);
        Ok(html(StatusCode::OK, page))
    })
    .await
}

/// What the job page shows; a 404 page for an id of no job of the tenant.
async fn job_view(
    state: &AppState,
    tenant_id: &str,
    job_id: &str,
) -> Result<pages::JobView, Refusal> {
    let not_found = || Refusal::Page(StatusCode::NOT_FOUND, format!("There is no job {job_id}."));
    if !is_job_id(job_id) {
        return Err(not_found());
    }
    let job = state
        .store
        .get_job(tenant_id, job_id)
        .await?
        .ok_or_else(not_found)?;
    let retries = state.store.retries_of(tenant_id, job_id).await?;
    let has_csv = serde_json::from_str(&job.params)
        .ok()
        .is_some_and(|params| {
            state.registry.get(&job.kind).is_some_and(|kind| {
                kind.chunk_renderer(&params, reports::ResultFormat::Csv)
                    .is_some()
            })
        });
    Ok(pages::JobView {
        job,
        retries,
        has_csv,
    })
}

/// A new Idempotency-Key for a webhook's form.
fn fresh_key() -> String {
    shared::ids::new_id("dashboard-")
}

async fn job(
    state: web::Data<AppState>,
    request: HttpRequest,
    job_id: web::Path<String>,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let view = job_view(&state, &viewer.caller.tenant_id, &job_id).await?;
        let notice = query_of(&request)
            .get("done")
            .map(|done| match done.as_str() {
                "retried" => "Retried: this is the new job.",
                "cancelled" => "Cancel requested.",
                _ => "Done.",
            });
        Ok(html(StatusCode::OK, pages::job(viewer, &view, notice)))
    })
    .await
}

async fn job_fragment(
    state: web::Data<AppState>,
    request: HttpRequest,
    job_id: web::Path<String>,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let view = job_view(&state, &viewer.caller.tenant_id, &job_id).await?;
        Ok(html(StatusCode::OK, pages::job_panel(viewer, &view)))
    })
    .await
}

async fn job_download(
    state: web::Data<AppState>,
    request: HttpRequest,
    job_id: web::Path<String>,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let csv = query_of(&request).get("format").map(String::as_str) == Some("csv");
        let mut response = job_result(&state, &viewer.caller.tenant_id, &job_id, csv).await?;
        let csv = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/csv"));
        let name = format!("{}.{}", job_id.as_str(), if csv { "csv" } else { "json" });
        response.headers_mut().insert(
            header::CONTENT_DISPOSITION,
            header::HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
                .map_err(|e| ApiError::Internal(e.to_string()))?,
        );
        Ok(response)
    })
    .await
}

async fn job_cancel(
    state: web::Data<AppState>,
    request: HttpRequest,
    job_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let act = async |caller: &Caller, key: &IdempotencyKey| {
        cancel_job(&state, &caller.tenant_id, key, &request, &job_id).await
    };
    let then = async |_: &Viewer, _| {
        let job_id = job_id.as_str();
        Ok(see_other(format!("{PATH}/jobs/{job_id}?done=cancelled")))
    };
    form_action(&state, &request, &body, Scope::Submit, act, then).await
}

async fn job_retry(
    state: web::Data<AppState>,
    request: HttpRequest,
    job_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let act = async |caller: &Caller, key: &IdempotencyKey| {
        retry_job(&state, caller, key, &request, &job_id).await
    };
    let then = async |_: &Viewer, answer: serde_json::Value| {
        let new_id = answer["job_id"].as_str().unwrap_or_default();
        Ok(see_other(format!("{PATH}/jobs/{new_id}?done=retried")))
    };
    form_action(&state, &request, &body, Scope::Submit, act, then).await
}

async fn webhooks(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let query = query_of(&request);
        let mut errors = Vec::new();
        let (limit, cursor) = limit_and_cursor(&query, "wh_", &mut errors);
        if !errors.is_empty() {
            let page = pages::webhooks(
                viewer,
                &[],
                None,
                &["That page link is not valid. Start again from the first page.".to_owned()],
            );
            return Ok(html(StatusCode::BAD_REQUEST, page));
        }
        let found = state
            .store
            .list_webhooks(&viewer.caller.tenant_id, cursor.as_deref(), limit)
            .await?;
        let (found, next_cursor) = cut(found, limit, |w| w.webhook_id.clone());
        let ids: Vec<String> = found.iter().map(|w| w.webhook_id.clone()).collect();
        let since = now_ms() - 24 * 60 * 60 * 1000;
        let mut health = state
            .store
            .webhook_health(&viewer.caller.tenant_id, &ids, since)
            .await?;
        let rows: Vec<pages::WebhookRow> = found
            .into_iter()
            .map(|webhook| pages::WebhookRow {
                health: health.remove(&webhook.webhook_id).unwrap_or_default(),
                webhook,
                enable_key: fresh_key(),
                rotate_key: fresh_key(),
            })
            .collect();
        let page = pages::webhooks(viewer, &rows, next_cursor.as_deref(), &[]);
        Ok(html(StatusCode::OK, page))
    })
    .await
}

/// The tenant's schedules, newest first, each with its next fires.
/// The kinds the tenant may submit, and its workers over HTTP.
async fn kinds(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let kinds = crate::routes::kinds::kind_list(&state, &viewer.caller.tenant_id).await?;
        let now = shared::time::now_ms();
        let workers: Vec<_> = state
            .store
            .workers(&viewer.caller.tenant_id)
            .await?
            .into_iter()
            .map(|worker| crate::routes::work::worker_object(worker, now))
            .collect();
        Ok(html(StatusCode::OK, pages::kinds(viewer, &kinds, &workers)))
    })
    .await
}

/// The tenant's keys and their scopes, for a key with the `admin` scope.
async fn keys(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        viewer.caller.require(Scope::Admin)?;
        let keys: Vec<_> = state
            .store
            .tenant_api_keys(&viewer.caller.tenant_id)
            .await?
            .iter()
            .map(crate::routes::keys::record_object)
            .collect();
        Ok(html(StatusCode::OK, pages::keys(viewer, &keys)))
    })
    .await
}

/// The audit log, for a key with the `admin` scope.
async fn audit(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        viewer.caller.require(Scope::Admin)?;
        let query = query_of(&request);
        let action = query.get("action").cloned().unwrap_or_default();
        let filter = match crate::routes::keys::audit_filter(&query) {
            Ok(filter) => filter,
            Err(_) => {
                let errors = [
                    "That filter or page link is not valid. Start again from the first page."
                        .to_owned(),
                ];
                return Ok(html(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    pages::audit(viewer, &[], "", None, &errors),
                ));
            }
        };
        let entries = state
            .store
            .list_audit(&viewer.caller.tenant_id, &filter)
            .await?;
        let (entries, next) = cut(entries, filter.limit, |e| e.entry_id.clone());
        let entries: Vec<_> = entries
            .into_iter()
            .map(crate::routes::keys::audit_object)
            .collect();
        Ok(html(
            StatusCode::OK,
            pages::audit(viewer, &entries, &action, next.as_deref(), &[]),
        ))
    })
    .await
}

async fn schedules(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let query = query_of(&request);
        let mut errors = Vec::new();
        let (limit, cursor) = limit_and_cursor(&query, "sch_", &mut errors);
        if !errors.is_empty() {
            let page = pages::schedules(
                viewer,
                &[],
                None,
                &["That page link is not valid. Start again from the first page.".to_owned()],
            );
            return Ok(html(StatusCode::BAD_REQUEST, page));
        }
        let found = state
            .store
            .list_schedules(&viewer.caller.tenant_id, cursor.as_deref(), limit)
            .await?;
        let (found, next_cursor) = cut(found, limit, |s| s.schedule_id.clone());
        let rows: Vec<pages::ScheduleRow> = found
            .iter()
            .map(|schedule| pages::ScheduleRow {
                schedule: schedule_object(schedule),
                toggle_key: fresh_key(),
            })
            .collect();
        let page = pages::schedules(viewer, &rows, next_cursor.as_deref(), &[]);
        Ok(html(StatusCode::OK, page))
    })
    .await
}

/// One schedule, its next fires and the latest jobs it made.
async fn schedule(
    state: web::Data<AppState>,
    request: HttpRequest,
    schedule_id: web::Path<String>,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let not_found = || {
            Refusal::Page(
                StatusCode::NOT_FOUND,
                format!("There is no schedule {schedule_id}."),
            )
        };
        if !is_id(&schedule_id, "sch_") {
            return Err(not_found());
        }
        let found = state
            .store
            .get_schedule(&viewer.caller.tenant_id, &schedule_id)
            .await?
            .ok_or_else(not_found)?;
        let filter = JobFilter {
            schedule_id: Some(found.schedule_id.clone()),
            limit: 20,
            ..JobFilter::default()
        };
        let mut jobs = state
            .store
            .list_jobs(&viewer.caller.tenant_id, &filter)
            .await?;
        jobs.truncate(20);
        let row = pages::ScheduleRow {
            schedule: schedule_object(&found),
            toggle_key: fresh_key(),
        };
        let notice = query_of(&request)
            .get("done")
            .map(|done| match done.as_str() {
                "paused" => "Paused: it makes no job until resumed.",
                _ => "Resumed: it goes on from its next fire.",
            });
        Ok(html(
            StatusCode::OK,
            pages::schedule(viewer, &row, &jobs, notice),
        ))
    })
    .await
}

async fn schedule_pause(
    state: web::Data<AppState>,
    request: HttpRequest,
    schedule_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    schedule_toggle(
        &state,
        &request,
        &schedule_id,
        &body,
        Change::Pause,
        "paused",
    )
    .await
}

async fn schedule_resume(
    state: web::Data<AppState>,
    request: HttpRequest,
    schedule_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    schedule_toggle(
        &state,
        &request,
        &schedule_id,
        &body,
        Change::Resume,
        "resumed",
    )
    .await
}

/// A pause or resume form: the API's change, then the schedule's page.
async fn schedule_toggle(
    state: &AppState,
    request: &HttpRequest,
    schedule_id: &str,
    body: &[u8],
    change: Change,
    done: &str,
) -> HttpResponse {
    let act = async |caller: &Caller, key: &IdempotencyKey| {
        change_schedule(state, key, request, &[], schedule_id, change, caller).await
    };
    let then = async |_: &Viewer, _| {
        Ok(see_other(format!(
            "{PATH}/schedules/{schedule_id}?done={done}"
        )))
    };
    form_action(state, request, body, Scope::Manage, act, then).await
}

/// One webhook of the tenant, its health and its latest deliveries.
async fn webhook_view(
    state: &AppState,
    tenant_id: &str,
    webhook_id: &str,
) -> Result<(pages::WebhookRow, Vec<store::Delivery>), Refusal> {
    let not_found = || {
        Refusal::Page(
            StatusCode::NOT_FOUND,
            format!("There is no webhook {webhook_id}."),
        )
    };
    if !is_id(webhook_id, "wh_") {
        return Err(not_found());
    }
    let webhook = state
        .store
        .get_webhook(tenant_id, webhook_id)
        .await?
        .ok_or_else(not_found)?;
    let since = now_ms() - 24 * 60 * 60 * 1000;
    let ids = [webhook.webhook_id.clone()];
    let health = state
        .store
        .webhook_health(tenant_id, &ids, since)
        .await?
        .remove(webhook_id)
        .unwrap_or_default();
    let mut deliveries = state.store.list_deliveries(webhook_id, None, 20).await?;
    deliveries.truncate(20);
    Ok((
        pages::WebhookRow {
            webhook,
            health,
            enable_key: fresh_key(),
            rotate_key: fresh_key(),
        },
        deliveries,
    ))
}

async fn webhook(
    state: web::Data<AppState>,
    request: HttpRequest,
    webhook_id: web::Path<String>,
) -> HttpResponse {
    respond(&state, &request, async |viewer| {
        let (row, deliveries) = webhook_view(&state, &viewer.caller.tenant_id, &webhook_id).await?;
        let notice = query_of(&request)
            .get("done")
            .map(|_| "Enabled: events of jobs that end from now on are sent.");
        Ok(html(
            StatusCode::OK,
            pages::webhook(viewer, &row, &deliveries, notice, None),
        ))
    })
    .await
}

async fn webhook_enable(
    state: web::Data<AppState>,
    request: HttpRequest,
    webhook_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let act = async |caller: &Caller, key: &IdempotencyKey| {
        let change = WebhookChange::Enable;
        let (tenant_id, actor) = (&caller.tenant_id, caller.actor());
        change_webhook(
            &state,
            tenant_id,
            key,
            &request,
            &webhook_id,
            change,
            &actor,
        )
        .await
    };
    let then = async |_: &Viewer, _| {
        let webhook_id = webhook_id.as_str();
        Ok(see_other(format!(
            "{PATH}/webhooks/{webhook_id}?done=enabled"
        )))
    };
    form_action(&state, &request, &body, Scope::Manage, act, then).await
}

async fn webhook_rotate(
    state: web::Data<AppState>,
    request: HttpRequest,
    webhook_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let act = async |caller: &Caller, key: &IdempotencyKey| {
        let change = WebhookChange::RotateSecret;
        let (tenant_id, actor) = (&caller.tenant_id, caller.actor());
        change_webhook(
            &state,
            tenant_id,
            key,
            &request,
            &webhook_id,
            change,
            &actor,
        )
        .await
    };
    let then = async |viewer: &Viewer, answer: serde_json::Value| {
        let secret = answer["secret"].as_str().unwrap_or_default();
        let (row, deliveries) = webhook_view(&state, &viewer.caller.tenant_id, &webhook_id).await?;
        // Shown once, on this answer to the POST, which is never cached.
        Ok(html(
            StatusCode::OK,
            pages::webhook(viewer, &row, &deliveries, None, Some(secret)),
        ))
    };
    form_action(&state, &request, &body, Scope::Manage, act, then).await
}
