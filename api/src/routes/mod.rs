pub mod jobs;
pub mod ledger;
pub mod paging;
pub mod periods;
pub mod reports;
pub mod service;
pub mod webhooks;

use actix_web::{HttpResponse, http::header};
use shared::model::{Job, JobObject};

use crate::{error::ApiResult, state::AppState};

/// `Retry-After` while a job is not final, in seconds.
pub const POLL_AFTER_SECS: &str = "1";

/// A job object answer, with `Retry-After` while the job is not final.
pub fn job_response(
    mut builder: actix_web::HttpResponseBuilder,
    job: &Job,
    object: &JobObject,
) -> HttpResponse {
    if !job.status.is_final() {
        builder.insert_header((header::RETRY_AFTER, POLL_AFTER_SECS));
    }
    builder.json(object)
}

/// The job object, with a saga's `phase` and `steps` (`docs/api.md`).
pub async fn job_object(state: &AppState, job: &Job) -> ApiResult<JobObject> {
    let mut object = job.to_object();
    let names = state
        .registry
        .get(&job.kind)
        .map(|kind| kind.step_names())
        .unwrap_or_default();
    if !names.is_empty() {
        let (run, records) = state.store.saga_state(&job.job_id).await?;
        let (phase, steps) = shared::saga::job_view(&names, run.as_ref(), &records);
        object.phase = Some(phase);
        object.steps = Some(steps);
    }
    Ok(object)
}
