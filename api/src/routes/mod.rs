pub mod jobs;
pub mod ledger;
pub mod paging;
pub mod periods;
pub mod reports;
pub mod schedules;
pub mod service;
pub mod webhooks;

use actix_web::{HttpResponse, http::header, web};
use shared::model::{Job, JobObject, WaitReason};

use crate::{error::ApiResult, state::AppState};

/// Body limit of every route but the ledger import (`docs/api.md`).
const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
const LEDGER_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// A schedule is read whole as JSON (its template may hold any value), so
/// its body is kept small.
const SCHEDULE_BODY_LIMIT: usize = 64 * 1024;

/// Registers every route the server serves.
pub fn configure(cfg: &mut web::ServiceConfig) {
    // One resource per path, so a wrong method answers 405 with `Allow`.
    cfg.service(web::resource("/healthz").get(service::healthz))
        .service(web::resource("/readyz").get(service::readyz))
        .service(web::resource("/metrics").get(service::metrics))
        .service(web::resource("/openapi.json").get(service::openapi))
        .configure(crate::dashboard::routes)
        .service(
            web::scope("/v1")
                .app_data(web::PayloadConfig::new(DEFAULT_BODY_LIMIT))
                .service(web::resource("/reports/{kind}").post(reports::submit))
                .service(web::resource("/jobs").get(jobs::list))
                .service(
                    web::resource("/schedules")
                        .app_data(web::PayloadConfig::new(SCHEDULE_BODY_LIMIT))
                        .post(schedules::create)
                        .get(schedules::list),
                )
                .service(
                    web::resource("/schedules/{schedule_id}")
                        .app_data(web::PayloadConfig::new(SCHEDULE_BODY_LIMIT))
                        .get(schedules::get)
                        .patch(schedules::change)
                        .delete(schedules::delete),
                )
                .service(web::resource("/schedules/{schedule_id}/pause").post(schedules::pause))
                .service(web::resource("/schedules/{schedule_id}/resume").post(schedules::resume))
                .service(web::resource("/jobs/{job_id}").get(jobs::get))
                .service(web::resource("/jobs/{job_id}/result").get(jobs::result))
                .service(web::resource("/jobs/{job_id}/cancel").post(jobs::cancel))
                .service(web::resource("/jobs/{job_id}/retry").post(jobs::retry))
                .service(
                    web::resource("/webhooks")
                        .post(webhooks::register)
                        .get(webhooks::list),
                )
                .service(
                    web::resource("/webhooks/{webhook_id}")
                        .get(webhooks::get)
                        .delete(webhooks::delete),
                )
                .service(
                    web::resource("/webhooks/{webhook_id}/deliveries").get(webhooks::deliveries),
                )
                .service(web::resource("/webhooks/{webhook_id}/enable").post(webhooks::enable))
                .service(
                    web::resource("/filing-endpoint")
                        .put(periods::put_filing_endpoint)
                        .get(periods::get_filing_endpoint),
                )
                .service(web::resource("/periods/{month}").get(periods::get_period))
                .service(web::resource("/periods/{month}/reopen").post(periods::reopen_period))
                .service(
                    web::resource("/webhooks/{webhook_id}/rotate-secret")
                        .post(webhooks::rotate_secret),
                )
                .service(
                    web::resource("/ledger/entries")
                        .app_data(web::PayloadConfig::new(LEDGER_BODY_LIMIT))
                        .post(ledger::import),
                ),
        );
}

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
