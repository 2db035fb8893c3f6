//! The OpenAPI 3.1 document, generated from the handlers' annotations; a
//! test checks that every path in it is served.

use utoipa::{
    Modify, OpenApi,
    openapi::security::{Http, HttpAuthScheme, SecurityScheme},
};

use crate::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "Receipt", description = "Slow report work, done asynchronously and safely: submit, get a 202 and a Location, poll or long-poll the job."),
    paths(
        routes::reports::submit,
        routes::jobs::get,
        routes::jobs::result,
        routes::jobs::cancel,
        routes::jobs::list,
        routes::ledger::import,
        routes::webhooks::register,
        routes::webhooks::list,
        routes::webhooks::get,
        routes::webhooks::delete,
        routes::webhooks::deliveries,
        routes::service::healthz,
        routes::service::readyz,
        routes::service::metrics,
        routes::service::openapi,
    ),
    components(schemas(
        shared::model::JobObject,
        shared::model::JobStatus,
        shared::model::JobErrorObject,
        shared::ledger::FieldError,
        shared::ledger::LedgerEntryInput,
        routes::jobs::JobPage,
        routes::ledger::ImportRequest,
        routes::ledger::ImportResponse,
        routes::webhooks::RegisterWebhook,
        routes::webhooks::WebhookObject,
        routes::webhooks::WebhookPage,
        routes::webhooks::DeliveryObject,
        routes::webhooks::DeliveryPage,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
