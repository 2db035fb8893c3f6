//! Kinds a tenant registers (`PUT /v1/kinds/{name}`): what a declaration
//! may say, and the check of a submit's parameters against its JSON
//! Schema (2020-12), compiled once per declaration. Schemas may not refer
//! to anything outside themselves (no remote or file `$ref`), and their
//! `pattern`s run on a regex engine that takes time linear in the input,
//! so that no declaration can make a submit slow.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use shared::{ledger::FieldError, model::Priority, work::KindDeclaration};
use store::RegisteredKind;

use crate::{ParamsError, Registry};

/// Field errors reported for one refused submit, at most.
const MOST_ERRORS: usize = 20;
/// A field error's message, at most (in characters): the validator's
/// messages quote the value they refuse.
const MOST_MESSAGE_CHARS: usize = 300;
/// The longest attempt a kind may declare.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The most attempts a kind may declare.
pub const MAX_ATTEMPTS: i64 = 100;
/// Compiled schemas kept per process.
const MOST_COMPILED: usize = 1_000;

/// Whether `name` may name a registered kind: 1 to 64 lowercase letters,
/// digits, `-`, `_` or `.`, starting with a letter, and not a built-in
/// kind's name.
pub fn check_name(name: &str) -> Result<(), FieldError> {
    let well_formed = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    if !well_formed {
        return Err(FieldError::new(
            "name",
            "must be 1 to 64 lowercase letters, digits, '-', '_' or '.', starting with a letter",
        ));
    }
    if Registry::all().get(name).is_some() {
        return Err(FieldError::new(
            "name",
            format!("{name:?} is a built-in kind; its name is reserved"),
        ));
    }
    Ok(())
}

/// The kind `declaration` registers for `tenant_id` under `name`, or every
/// field that is wrong.
pub fn kind_of(
    declaration: &KindDeclaration,
    tenant_id: &str,
    name: &str,
) -> Result<RegisteredKind, Vec<FieldError>> {
    let mut errors = Vec::new();
    if let Err(error) = check_name(name) {
        errors.push(error);
    }
    if let Err(error) = compile(&declaration.params_schema) {
        errors.push(error);
    }
    if !(1..=MAX_TIMEOUT.as_secs()).contains(&declaration.timeout_secs) {
        errors.push(FieldError::new(
            "timeout_secs",
            format!("must be a whole number from 1 to {}", MAX_TIMEOUT.as_secs()),
        ));
    }
    let max_attempts = declaration.max_attempts.unwrap_or(5);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        errors.push(FieldError::new(
            "max_attempts",
            format!("must be a whole number from 1 to {MAX_ATTEMPTS}"),
        ));
    }
    if declaration
        .max_running
        .is_some_and(|cap| !(1..=10_000).contains(&cap))
    {
        errors.push(FieldError::new(
            "max_running",
            "must be a whole number from 1 to 10000",
        ));
    }
    let about = declaration.about.clone().unwrap_or_default();
    if about.chars().count() > 1_000 {
        errors.push(FieldError::new("about", "must be at most 1000 characters"));
    }
    let media_types = declaration
        .result_media_types
        .clone()
        .unwrap_or_else(|| vec!["application/json".to_owned()]);
    if media_types.is_empty() || media_types.len() > 16 {
        errors.push(FieldError::new(
            "result_media_types",
            "must name 1 to 16 media types",
        ));
    }
    for media_type in &media_types {
        if !is_media_type(media_type) {
            errors.push(FieldError::new(
                "result_media_types",
                format!("{media_type:?} is not a media type (type/subtype, no parameters)"),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(RegisteredKind {
        tenant_id: tenant_id.to_owned(),
        name: name.to_owned(),
        about,
        params_schema: declaration.params_schema.to_string(),
        timeout_ms: i64::try_from(declaration.timeout_secs * 1000).unwrap_or(i64::MAX),
        max_attempts,
        result_media_types: media_types,
        max_running: declaration.max_running,
        priority: declaration.priority.unwrap_or(Priority::Normal),
        created_at: 0,
        updated_at: 0,
        deleted_at: None,
    })
}

/// `type/subtype` of RFC 6838's restricted names, lowercase, no parameters.
fn is_media_type(text: &str) -> bool {
    let name = |part: &str| {
        (1..=127).contains(&part.len())
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "!#$&-^_.+".contains(c))
    };
    matches!(text.split_once('/'), Some((kind, sub)) if name(kind) && name(sub))
}

/// The schema compiled for Draft 2020-12, or why it cannot be.
fn compile(schema: &Value) -> Result<jsonschema::Validator, FieldError> {
    let refused = |why: String| FieldError::new("params_schema", why);
    if !schema.is_object() {
        return Err(refused("must be a JSON Schema object".into()));
    }
    if let Some(declared) = schema.get("$schema")
        && declared.as_str() != Some("https://json-schema.org/draft/2020-12/schema")
    {
        return Err(refused(
            "must be Draft 2020-12: $schema is https://json-schema.org/draft/2020-12/schema, or absent"
                .into(),
        ));
    }
    jsonschema::draft202012::meta::validate(schema).map_err(|e| {
        refused(format!(
            "is not a valid JSON Schema: {}",
            bounded(&e.to_string())
        ))
    })?;
    jsonschema::draft202012::options()
        .with_pattern_options(jsonschema::PatternOptions::regex().size_limit(1 << 20))
        .build(schema)
        .map_err(|e| refused(format!("cannot be used: {}", bounded(&e.to_string()))))
}

fn bounded(message: &str) -> String {
    if message.chars().count() <= MOST_MESSAGE_CHARS {
        return message.to_owned();
    }
    let mut cut: String = message.chars().take(MOST_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

/// The compiled schemas of registered kinds this process has checked
/// submits against, by tenant, name and the time of their declaration
/// (a changed declaration is compiled afresh).
#[derive(Clone, Default)]
pub struct CompiledSchemas {
    compiled: Arc<Mutex<Compiled>>,
}

/// (tenant, name) -> the declaration's `updated_at`, and its schema compiled.
type Compiled = HashMap<(String, String), (i64, Arc<jsonschema::Validator>)>;

impl CompiledSchemas {
    /// Checks a submit's body against `kind`'s schema: the body as the job
    /// keeps it, or a 400 (not JSON, not an object) or 422 naming each
    /// field that fails.
    pub fn accept(&self, kind: &RegisteredKind, body: &[u8]) -> Result<Value, ParamsError> {
        let params: Value = serde_json::from_slice(body)
            .map_err(|e| ParamsError::Malformed(format!("the body is not valid JSON: {e}")))?;
        if !params.is_object() {
            return Err(ParamsError::Malformed(
                "the parameters must be a JSON object".into(),
            ));
        }
        let validator = self.validator(kind)?;
        let errors: Vec<FieldError> = validator
            .iter_errors(&params)
            .take(MOST_ERRORS)
            .map(|error| {
                let path = error.instance_path().as_str();
                let field = if path.is_empty() {
                    "(body)".to_owned()
                } else {
                    path.trim_start_matches('/').replace('/', ".")
                };
                FieldError::new(&field, bounded(&error.to_string()))
            })
            .collect();
        if errors.is_empty() {
            Ok(params)
        } else {
            Err(ParamsError::Invalid(errors))
        }
    }

    fn validator(&self, kind: &RegisteredKind) -> Result<Arc<jsonschema::Validator>, ParamsError> {
        let key = (kind.tenant_id.clone(), kind.name.clone());
        if let Some((at, validator)) = self.lock().get(&key)
            && *at == kind.updated_at
        {
            return Ok(validator.clone());
        }
        let schema: Value = serde_json::from_str(&kind.params_schema)
            .map_err(|e| ParamsError::Malformed(format!("the kind's schema: {e}")))?;
        let validator = Arc::new(
            compile(&schema)
                .map_err(|e| ParamsError::Malformed(format!("the kind's schema {}", e.message)))?,
        );
        let mut compiled = self.lock();
        if compiled.len() >= MOST_COMPILED {
            compiled.clear();
        }
        compiled.insert(key, (kind.updated_at, validator.clone()));
        Ok(validator)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Compiled> {
        self.compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{CompiledSchemas, KindDeclaration, check_name, is_media_type, kind_of};
    use crate::ParamsError;

    fn declaration(schema: serde_json::Value) -> KindDeclaration {
        serde_json::from_value(json!({"params_schema": schema, "timeout_secs": 60})).unwrap()
    }

    #[test]
    fn names_are_plain_and_built_in_ones_are_reserved() {
        assert!(check_name("sales-export").is_ok());
        assert!(check_name("a.b_c-1").is_ok());
        for bad in ["", "Sales", "1abc", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(check_name("gst-summary").is_err());
    }

    #[test]
    fn media_types_are_type_and_subtype() {
        assert!(is_media_type("text/csv"));
        assert!(is_media_type(
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        ));
        for bad in [
            "text",
            "text/",
            "/csv",
            "text/csv; charset=utf-8",
            "Text/CSV",
        ] {
            assert!(!is_media_type(bad), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_schema_that_refers_outside_itself_or_is_no_schema_is_refused() {
        let outside = declaration(json!({"$ref": "https://example.com/schema.json"}));
        let errors = kind_of(&outside, "t", "k").unwrap_err();
        assert_eq!(errors[0].field, "params_schema", "{errors:?}");
        let wrong_type = declaration(json!({"type": "no-such-type"}));
        assert!(kind_of(&wrong_type, "t", "k").is_err());
        let draft7 = declaration(json!({"$schema": "http://json-schema.org/draft-07/schema#"}));
        assert!(kind_of(&draft7, "t", "k").is_err());
    }

    #[test]
    fn a_submit_is_checked_against_the_schema_naming_each_failing_field() {
        let kind = kind_of(&declaration(json!({
            "type": "object",
            "properties": {
                "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
                "rows": {"type": "integer", "minimum": 1},
                "filter": {"type": "object", "properties": {"region": {"enum": ["north", "south"]}}}
            },
            "required": ["month"],
            "additionalProperties": false
        })), "t", "sales-export")
        .unwrap();
        let schemas = CompiledSchemas::default();
        let good = br#"{"month": "2026-10", "rows": 3, "filter": {"region": "north"}}"#;
        assert_eq!(schemas.accept(&kind, good).unwrap()["rows"], 3);
        let bad = br#"{"month": "October", "rows": 0, "filter": {"region": "east"}}"#;
        let Err(ParamsError::Invalid(errors)) = schemas.accept(&kind, bad) else {
            panic!("a bad submit was accepted");
        };
        let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["filter.region", "month", "rows"]);
        assert!(matches!(
            schemas.accept(&kind, b"[1]"),
            Err(ParamsError::Malformed(_))
        ));
        assert!(matches!(
            schemas.accept(&kind, b"{\"month\""),
            Err(ParamsError::Malformed(_))
        ));
    }
}
