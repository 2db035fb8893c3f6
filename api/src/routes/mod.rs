pub mod jobs;
pub mod keys;
pub mod kinds;
pub mod ledger;
pub mod paging;
pub mod periods;
pub mod reports;
pub mod schedules;
pub mod service;
pub mod webhooks;
pub mod work;

use actix_web::web;

/// Body limit of every route but the ledger import (`docs/api.md`).
const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
const LEDGER_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// A schedule is read whole as JSON (its template may hold any value), so
/// its body is kept small.
const SCHEDULE_BODY_LIMIT: usize = 64 * 1024;
/// A kind's declaration, its schema included.
const KIND_BODY_LIMIT: usize = 64 * 1024;

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
                .service(web::resource("/kinds").get(kinds::list))
                .service(
                    web::resource("/kinds/{name}")
                        .app_data(web::PayloadConfig::new(KIND_BODY_LIMIT))
                        .get(kinds::get)
                        .put(kinds::put)
                        .delete(kinds::delete),
                )
                .service(web::resource("/workers").get(work::workers))
                .service(web::resource("/work/lease").post(work::lease))
                .service(web::resource("/work/attempts/{token}/heartbeat").post(work::heartbeat))
                // A result streams in, bounded by the route itself.
                .service(web::resource("/work/attempts/{token}/complete").post(work::complete))
                .service(web::resource("/work/attempts/{token}/fail").post(work::fail))
                .service(web::resource("/work/attempts/{token}/cancelled").post(work::cancelled))
                .service(web::resource("/work/reports").post(work::reports))
                .service(web::resource("/jobs").get(jobs::list))
                .service(web::resource("/key").get(keys::current))
                .service(web::resource("/keys").get(keys::list).post(keys::create))
                .service(web::resource("/keys/{key_id}").delete(keys::revoke))
                .service(web::resource("/audit").get(keys::audit))
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
