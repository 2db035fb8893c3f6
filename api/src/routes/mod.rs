pub mod jobs;
pub mod ledger;
pub mod paging;
pub mod reports;
pub mod service;
pub mod webhooks;

use actix_web::{HttpResponse, http::header};
use shared::model::Job;

/// `Retry-After` while a job is not final, in seconds.
pub const POLL_AFTER_SECS: &str = "1";

/// A job object answer, with `Retry-After` while the job is not final.
pub fn job_response(mut builder: actix_web::HttpResponseBuilder, job: &Job) -> HttpResponse {
    if !job.status.is_final() {
        builder.insert_header((header::RETRY_AFTER, POLL_AFTER_SECS));
    }
    builder.json(job.to_object())
}
