//! The OpenAPI 3.1 document, generated from the handlers' annotations; a
//! test checks that every path in it is served, and another that standard
//! tools accept it (a validator, and a client generator whose client then
//! talks to the service).

use utoipa::{
    Modify, OpenApi,
    openapi::{
        ContentBuilder, HeaderBuilder, Ref, RefOr, ResponseBuilder,
        path::{Operation, ParameterBuilder, ParameterIn},
        schema::{ObjectBuilder, Schema, Type},
        security::{Http, HttpAuthScheme, SecurityScheme},
    },
};

use crate::{error::PROBLEM_JSON, routes};

#[derive(OpenApi)]
#[openapi(
    info(title = "Receipt", description = "Slow report work, done asynchronously and safely: submit, get a 202 and a Location, poll or long-poll the job."),
    paths(
        routes::reports::submit,
        routes::jobs::get,
        routes::jobs::result,
        routes::jobs::cancel,
        routes::jobs::list,
        routes::jobs::retry,
        routes::ledger::import,
        routes::webhooks::register,
        routes::webhooks::list,
        routes::webhooks::get,
        routes::webhooks::delete,
        routes::webhooks::deliveries,
        routes::webhooks::enable,
        routes::webhooks::rotate_secret,
        routes::periods::put_filing_endpoint,
        routes::periods::get_filing_endpoint,
        routes::periods::get_period,
        routes::periods::reopen_period,
        routes::service::healthz,
        routes::service::readyz,
        routes::service::metrics,
        routes::service::openapi,
    ),
    components(schemas(
        crate::error::Problem,
        shared::model::JobObject,
        shared::model::JobStatus,
        shared::model::JobErrorObject,
        shared::model::StepObject,
        shared::model::CompensationObject,
        shared::ledger::FieldError,
        shared::ledger::LedgerEntryInput,
        reports::GstSummaryParams,
        reports::LedgerExportParams,
        reports::SleepParams,
        routes::reports::ReportParams,
        routes::jobs::JobPage,
        routes::ledger::ImportRequest,
        routes::ledger::ImportResponse,
        routes::webhooks::RegisterWebhook,
        routes::webhooks::WebhookObject,
        routes::webhooks::WebhookPage,
        routes::webhooks::DeliveryObject,
        routes::webhooks::DeliveryPage,
        routes::periods::PutFilingEndpoint,
        routes::periods::FilingEndpointObject,
        routes::periods::PeriodObject,
        routes::service::Health,
    )),
    modifiers(&BearerAuth, &ContractRules),
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

/// The rules `docs/api.md` states once for every route, written into every
/// operation here rather than repeated in each annotation, as the code has
/// them in one place each: every error is a `Problem` (`error.rs`); every
/// route with a key can answer 401, 429 (the rate limit comes after the
/// key) and 503 (it reads the database); every POST takes an
/// `Idempotency-Key` (its extractor).
struct ContractRules;

impl Modify for ContractRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            if let Some(post) = item.post.as_mut() {
                add_idempotency_key(post);
            }
            let operations = [
                item.get.as_mut(),
                item.post.as_mut(),
                item.delete.as_mut(),
                item.put.as_mut(),
                item.patch.as_mut(),
            ];
            for operation in operations.into_iter().flatten() {
                if operation.security.is_some() {
                    for (status, description) in [
                        ("401", "missing or invalid API key"),
                        (
                            "429",
                            "over the tenant's request rate (RATE_LIMIT); nothing changed",
                        ),
                        (
                            "503",
                            "the database or the queue does not answer; nothing changed",
                        ),
                    ] {
                        add_response(operation, status, description);
                    }
                }
                add_response(
                    operation,
                    "default",
                    "any other error; an unexpected fault is a 500 whose cause is logged, never sent",
                );
                for (status, response) in &mut operation.responses.responses {
                    if let RefOr::T(response) = response {
                        describe_error(status, response);
                    }
                }
            }
        }
    }
}

fn add_response(operation: &mut Operation, status: &str, description: &str) {
    operation
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| ResponseBuilder::new().description(description).into());
}

/// An error response's body is a `Problem`; 401 says how to authenticate,
/// 429 and 503 when to come back.
fn describe_error(status: &str, response: &mut utoipa::openapi::Response) {
    if !(status == "default" || status.starts_with('4') || status.starts_with('5')) {
        return;
    }
    response.content.clear();
    response.content.insert(
        PROBLEM_JSON.to_owned(),
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build(),
    );
    let header = match status {
        "401" => Some((
            "WWW-Authenticate",
            Type::String,
            "`Bearer`: send `Authorization: Bearer <api key>`",
        )),
        "429" | "503" => Some((
            "Retry-After",
            Type::Integer,
            "whole seconds (at least 1) to wait before trying again",
        )),
        _ => None,
    };
    if let Some((name, schema_type, description)) = header {
        response.headers.insert(
            name.to_owned(),
            HeaderBuilder::new()
                .schema(Schema::Object(
                    ObjectBuilder::new().schema_type(schema_type).build(),
                ))
                .description(Some(description))
                .build(),
        );
    }
}

fn add_idempotency_key(operation: &mut Operation) {
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    if parameters.iter().any(|p| p.name == "Idempotency-Key") {
        return;
    }
    parameters.push(
        ParameterBuilder::new()
            .name("Idempotency-Key")
            .parameter_in(ParameterIn::Header)
            .description(Some(
                "1 to 255 visible ASCII characters, bare or as a quoted string: a retry with \
                 the same key and request gets the first answer again (`Idempotent-Replayed: \
                 true`) and runs nothing twice",
            ))
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(255)),
            ))
            .build(),
    );
}
