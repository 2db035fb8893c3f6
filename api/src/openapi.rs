//! The OpenAPI 3.1 document, generated from the handlers' annotations and
//! from the report kinds of the registry; a test checks that every path in
//! it is served, and another that standard tools accept it (a validator,
//! and a client generator whose client then talks to the service).

use reports::Registry;
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
        routes::kinds::list,
        routes::kinds::get,
        routes::kinds::put,
        routes::kinds::delete,
        routes::work::lease,
        routes::work::heartbeat,
        routes::work::complete,
        routes::work::fail,
        routes::work::cancelled,
        routes::work::reports,
        routes::work::workers,
        routes::jobs::get,
        routes::jobs::result,
        routes::jobs::cancel,
        routes::jobs::list,
        routes::jobs::retry,
        routes::schedules::create,
        routes::schedules::list,
        routes::schedules::get,
        routes::schedules::change,
        routes::schedules::pause,
        routes::schedules::resume,
        routes::schedules::delete,
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
        routes::keys::current,
        routes::keys::list,
        routes::keys::create,
        routes::keys::revoke,
        routes::keys::audit,
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
        shared::model::WaitingObject,
        shared::model::WaitReason,
        shared::model::StepObject,
        shared::model::CompensationObject,
        shared::ledger::FieldError,
        shared::ledger::LedgerEntryInput,
        routes::reports::ReportParams,
        shared::work::KindObject,
        shared::work::KindList,
        shared::work::DeletedKind,
        shared::work::KindDeclaration,
        shared::model::Priority,
        shared::work::LeaseRequest,
        shared::work::LeaseAnswer,
        shared::work::LeasedAttemptObject,
        shared::work::HeartbeatRequest,
        shared::work::HeartbeatAnswer,
        shared::work::FailRequest,
        shared::work::ReportAnswer,
        shared::work::ReportsRequest,
        shared::work::AttemptReportDocument,
        shared::work::ReportOutcomeName,
        shared::work::ReportsAnswer,
        shared::work::ReportOutcome,
        shared::work::WorkerObject,
        shared::work::WorkerList,
        routes::jobs::JobPage,
        routes::schedules::CreateSchedule,
        routes::schedules::ChangeSchedule,
        routes::schedules::ScheduleObject,
        routes::schedules::SchedulePage,
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
        routes::keys::KeyObject,
        routes::keys::KeyList,
        routes::keys::CreateKey,
        routes::keys::AuditEntryObject,
        routes::keys::AuditPage,
    )),
    modifiers(&BearerAuth, &ReportKinds, &ContractRules),
)]
pub struct ApiDoc;

/// The words of `POST /v1/reports/{kind}` that depend on the kinds, from
/// the registry: the kinds in the path, what each does, and when a kind
/// refuses a submit (409).
struct ReportKinds;

impl Modify for ReportKinds {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(submit) = openapi
            .paths
            .paths
            .get_mut("/v1/reports/{kind}")
            .and_then(|item| item.post.as_mut())
        else {
            return;
        };
        let registry = Registry::all();
        let (served, diagnostic): (Vec<_>, Vec<_>) =
            registry.kinds().partition(|kind| !kind.diagnostic());
        let mut kinds = served
            .iter()
            .map(|kind| kind.name())
            .collect::<Vec<_>>()
            .join(", ");
        if !diagnostic.is_empty() {
            let diagnostic: Vec<&str> = diagnostic.iter().map(|kind| kind.name()).collect();
            kinds += &format!(
                " (or {} when diagnostic kinds are enabled)",
                diagnostic.join(" or ")
            );
        }
        for parameter in submit.parameters.iter_mut().flatten() {
            if parameter.name == "kind" {
                parameter.description = Some(format!(
                    "report kind: {kinds}, or one the tenant registered (`GET /v1/kinds` shows \
                     its schema)"
                ));
            }
        }

        let mut description = String::from("The kinds, by the name in the path:\n");
        for kind in registry.kinds() {
            let diagnostic = if kind.diagnostic() {
                " (diagnostic: served only with `ENABLE_DIAGNOSTIC_KINDS=true`)"
            } else {
                ""
            };
            description += &format!(
                "\n- `{}` (`{}`){diagnostic}: {}",
                kind.name(),
                kind.params_schema().name,
                kind.about()
            );
        }
        submit.description = Some(description);

        let mut conflict =
            String::from("the Idempotency-Key is still in progress (with `Retry-After`)");
        for kind in registry.kinds() {
            if let Some(when) = kind.refused_when() {
                conflict += &format!("; or, for {}, {when}", kind.name());
            }
        }
        conflict += "; nothing stored";
        submit.responses.responses.insert(
            "409".to_owned(),
            ResponseBuilder::new().description(conflict).into(),
        );
    }
}

/// The document as a tenant sees it (`GET /openapi.json` with a key): the
/// base document, with each kind the tenant registered among the bodies of
/// `POST /v1/reports/{kind}` (`components.schemas."Registered.<name>"`) and
/// in that operation's description. A registered schema's `$defs` become
/// schemas of their own beside it (`Registered.<name>.<def>`), and its
/// references follow them, since generators resolve only references to
/// whole schemas of the document.
pub fn for_tenant(base: &[u8], kinds: &[store::RegisteredKind]) -> serde_json::Result<Vec<u8>> {
    use serde_json::{Value, json};
    let mut document: Value = serde_json::from_slice(base)?;
    for kind in kinds {
        let Ok(Value::Object(mut schema)) = serde_json::from_str::<Value>(&kind.params_schema)
        else {
            continue;
        };
        let name = format!("Registered.{}", kind.name);
        let mut moves = vec![("#".to_owned(), format!("#/components/schemas/{name}"))];
        let mut parts = vec![];
        for keyword in ["$defs", "definitions"] {
            let Some(Value::Object(defs)) = schema.remove(keyword) else {
                continue;
            };
            for (def, part) in defs {
                let escaped = def.replace('~', "~0").replace('/', "~1");
                let own: String = def
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "._-".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let own = format!("{name}.{own}");
                moves.push((
                    format!("#/{keyword}/{escaped}"),
                    format!("#/components/schemas/{own}"),
                ));
                parts.push((own, part));
            }
        }
        // Longest first, so a def's own pointer wins over the schema's.
        moves.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut schema = Value::Object(schema);
        rebase_references(&mut schema, &moves);
        let schemas = &mut document["components"]["schemas"];
        for (own, mut part) in parts {
            rebase_references(&mut part, &moves);
            schemas[&own] = part;
        }
        schemas[&name] = schema;
        if let Some(bodies) = schemas["ReportParams"]["oneOf"].as_array_mut() {
            bodies.push(json!({ "$ref": format!("#/components/schemas/{name}") }));
        }
        let submit = &mut document["paths"]["/v1/reports/{kind}"]["post"];
        if let Some(description) = submit["description"].as_str() {
            let about = if kind.about.is_empty() {
                "run by the tenant's workers"
            } else {
                &kind.about
            };
            submit["description"] = Value::String(format!(
                "{description}\n- `{}` (`{name}`, registered by this tenant): {about}",
                kind.name
            ));
        }
    }
    serde_json::to_vec(&document)
}

/// Every `$ref` inside a schema that points into the schema itself made to
/// point where that part now is: `moves` pairs an old pointer's start with
/// its new one, longest first.
fn rebase_references(schema: &mut serde_json::Value, moves: &[(String, String)]) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(target) if key == "$ref" => {
                        let moved = moves.iter().find(|(from, _)| {
                            target.strip_prefix(from.as_str()).is_some_and(|rest| {
                                rest.is_empty() || rest.starts_with('/') || from == "#"
                            })
                        });
                        if let Some((from, to)) = moved {
                            *target = format!("{to}{}", &target[from.len()..]);
                        }
                    }
                    _ => rebase_references(value, moves),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rebase_references(item, moves)),
        _ => {}
    }
}

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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn every_kind_reaches_the_submit_operation_with_its_closed_parameter_schema() {
        let document = serde_json::to_value(ApiDoc::openapi()).expect("the document as JSON");
        let schemas = &document["components"]["schemas"];
        let bodies: Vec<&str> = schemas["ReportParams"]["oneOf"]
            .as_array()
            .expect("ReportParams is a oneOf")
            .iter()
            .filter_map(|body| body["$ref"].as_str())
            .collect();
        let submit = &document["paths"]["/v1/reports/{kind}"]["post"];
        let words = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let kind_parameter = submit["parameters"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == "kind"))
            .map(|p| words(&p["description"]))
            .unwrap_or_default();

        for kind in Registry::all().kinds() {
            let name = kind.params_schema().name;
            assert_eq!(
                schemas[&name]["additionalProperties"],
                Value::Bool(false),
                "{}: {name} is in the document as a closed schema",
                kind.name()
            );
            assert!(
                bodies.contains(&format!("#/components/schemas/{name}").as_str()),
                "{}: a submit's body may be {name}",
                kind.name()
            );
            assert!(kind_parameter.contains(kind.name()), "{kind_parameter}");
            assert!(
                words(&submit["description"]).contains(kind.about()),
                "{}: what it does is in the operation's description",
                kind.name()
            );
            if let Some(when) = kind.refused_when() {
                assert!(words(&submit["responses"]["409"]["description"]).contains(when));
            }
        }
    }
}
