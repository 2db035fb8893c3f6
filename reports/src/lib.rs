//! Report kinds. A kind is a file here plus one line in [`KINDS`]: its
//! name and what it does, its parameters (a closed schema in
//! `shared::report_params`, which the OpenAPI document shows and the
//! client sends, decoded once into that typed value, then checked), its
//! attempt limit and timeout, and how it runs.

mod chunks;
mod context;
mod gst_summary;
mod ledger_export;
mod period_close;
pub mod registered;
pub mod saga;
mod sleep;

use std::{collections::BTreeMap, time::Duration};

use std::marker::PhantomData;

use futures::future::BoxFuture;
use serde::{
    Deserialize, Deserializer, Serialize,
    de::{DeserializeOwned, MapAccess, Visitor, value::MapAccessDeserializer},
};
use serde_json::{Number, Value};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{RefOr, Schema},
};

pub use chunks::{CHUNK_BYTES, ChunkRenderer, ChunkWriter, ResultFormat};
pub use context::{JobContext, ProgressSink, RunSettings};
use gst_summary::GstSummary;
use ledger_export::LedgerExport;
pub use period_close::PERIOD_CLOSE;
use period_close::PeriodClose;
use sleep::Sleep;

use shared::ledger::FieldError;

/// Why parameters were refused before any job was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsError {
    /// Not the schema: wrong JSON type, unknown or missing field (400).
    Malformed(String),
    /// The schema, but values that do not make sense (422): a month that is
    /// no month, a negative or fractional number where a count belongs.
    Invalid(Vec<FieldError>),
}

impl std::fmt::Display for ParamsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamsError::Malformed(detail) => f.write_str(detail),
            ParamsError::Invalid(errors) => {
                let errors: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{} {}", e.field, e.message))
                    .collect();
                f.write_str(&errors.join("; "))
            }
        }
    }
}

/// How an attempt failed. The worker turns it into a retry, a final
/// failure, or a cancellation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// Worth another attempt after a backoff (a dependency hiccup, a timeout).
    Retryable { error_type: String, message: String },
    /// Another attempt would fail the same way.
    Permanent { error_type: String, message: String },
    /// The handler saw a cancel request at a checkpoint and stopped.
    Cancelled,
    /// The attempt lost its lease to a newer one: stop, write nothing.
    Superseded,
}

impl JobFailure {
    pub fn retryable(error_type: &str, message: impl Into<String>) -> Self {
        JobFailure::Retryable {
            error_type: error_type.to_owned(),
            message: message.into(),
        }
    }

    pub fn permanent(error_type: &str, message: impl Into<String>) -> Self {
        JobFailure::Permanent {
            error_type: error_type.to_owned(),
            message: message.into(),
        }
    }
}

/// The `error_type` of a handler's store error; retryable only when the
/// database did not answer (an outage, which the worker hands back
/// uncounted).
pub const STORE_ERROR: &str = "store_error";

/// A store error inside a handler: an outage is worth another attempt
/// (the database may be back); anything else (stored data that does not
/// decode, a refused write) is a bug that would fail the same way again.
impl From<store::Error> for JobFailure {
    fn from(error: store::Error) -> Self {
        if error.is_unavailable() {
            JobFailure::retryable(STORE_ERROR, error.to_string())
        } else {
            JobFailure::permanent(STORE_ERROR, error.to_string())
        }
    }
}

/// Parameters were checked at submit; a job whose stored parameters no
/// longer parse (a kind changed under it) would fail the same way again.
impl From<ParamsError> for JobFailure {
    fn from(error: ParamsError) -> Self {
        JobFailure::permanent("invalid_params", error.to_string())
    }
}

/// What a successful run produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportOutput {
    /// The whole result, one JSON document: for results that are small.
    Document(Value),
    /// The run wrote its result in this many chunks as it went
    /// ([`ChunkWriter`]): for results that may not fit in memory.
    Chunks(i64),
}

impl From<Value> for ReportOutput {
    fn from(document: Value) -> Self {
        ReportOutput::Document(document)
    }
}

pub type RunResult = Result<ReportOutput, JobFailure>;

/// A report kind, as its file writes it: its parameters are decoded once
/// into [`ReportKind::Body`] ([`decode_params`]), checked in one place,
/// [`ReportKind::check`], into [`ReportKind::Params`], and everything else
/// works from those typed values. The registry serves each kind as an
/// [`AnyReportKind`], whose parameters are JSON.
pub trait ReportKind: Send + Sync + 'static {
    /// The parameters as a client sends them: a closed schema
    /// (`#[serde(deny_unknown_fields)]`) in `shared::report_params`, which
    /// the Rust client sends too, and which the OpenAPI document shows
    /// under the type's name, with its doc comments. Serialized, it is
    /// what the job keeps.
    type Body: DeserializeOwned + Serialize + ToSchema;

    /// The parameters once decoded and checked.
    type Params: Send + Sync;

    /// The stable name clients use in `POST /v1/reports/{kind}`.
    fn name(&self) -> &'static str;

    /// What the kind does, in a sentence or two: the OpenAPI document's
    /// description of `POST /v1/reports/{kind}` lists it.
    fn about(&self) -> &'static str;

    /// A kind for trying the service out, served only with
    /// `ENABLE_DIAGNOSTIC_KINDS=true`.
    fn diagnostic(&self) -> bool {
        false
    }

    /// Attempts before a retryable failure becomes final (`docs/api.md`: 5).
    fn max_attempts(&self) -> i64 {
        5
    }

    /// How long one attempt may run before it counts as a retryable failure.
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }

    /// Checks the decoded parameters' values: at submit, where a refusal
    /// stores nothing, and again wherever stored parameters are used.
    fn check(&self, body: &Self::Body) -> Result<Self::Params, ParamsError>;

    fn run<'a>(&'a self, ctx: &'a JobContext, params: Self::Params) -> BoxFuture<'a, RunResult>;

    /// A saga's steps, in order (`docs/sagas.md`); empty for a kind of one step.
    fn step_names(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// A refusal of a submit that depends on stored state (409 with this
    /// reason); `None` to accept. Checked before the job is stored. A kind
    /// that refuses says when in [`ReportKind::refused_when`].
    fn refuse_submit<'a>(
        &'a self,
        _store: &'a store::Store,
        _tenant_id: &'a str,
        _params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>> {
        Box::pin(async { Ok(None) })
    }

    /// When [`ReportKind::refuse_submit`] refuses, in words: the OpenAPI
    /// document's 409 of `POST /v1/reports/{kind}` names it.
    fn refused_when(&self) -> Option<&'static str> {
        None
    }

    /// For kinds that write their result in chunks: how to serve it in
    /// `format`. `None` when the kind has no such format (a client asking
    /// for CSV then gets JSON).
    fn chunk_renderer(
        &self,
        _params: &Self::Params,
        _format: ResultFormat,
    ) -> Option<Box<dyn ChunkRenderer>> {
        None
    }
}

/// A report kind with its parameters as JSON, as the API receives them and
/// the store keeps them: every [`ReportKind`] is one.
pub trait AnyReportKind: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// [`ReportKind::about`].
    fn about(&self) -> &'static str;

    /// [`ReportKind::diagnostic`].
    fn diagnostic(&self) -> bool;

    /// [`ReportKind::Body`] as the OpenAPI document shows it.
    fn params_schema(&self) -> ParamsSchema;

    /// [`ReportKind::refused_when`].
    fn refused_when(&self) -> Option<&'static str>;

    fn max_attempts(&self) -> i64;

    fn timeout(&self) -> Duration;

    /// Decodes parameters into [`ReportKind::Body`], once, and checks
    /// them, before anything is stored: that body as JSON, which is what
    /// the job keeps.
    fn accept(&self, params: RawParams<'_>) -> Result<Value, ParamsError>;

    /// Runs on stored parameters; ones that no longer parse (the kind
    /// changed under its job) fail the job permanently.
    fn run<'a>(&'a self, ctx: &'a JobContext, params: Value) -> BoxFuture<'a, RunResult>;

    /// [`ReportKind::step_names`].
    fn step_names(&self) -> Vec<&'static str>;

    /// [`ReportKind::refuse_submit`].
    fn refuse_submit<'a>(
        &'a self,
        store: &'a store::Store,
        tenant_id: &'a str,
        params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>>;

    /// [`ReportKind::chunk_renderer`], given the job's stored parameters.
    fn chunk_renderer(
        &self,
        params: &Value,
        format: ResultFormat,
    ) -> Option<Box<dyn ChunkRenderer>>;
}

impl<K: ReportKind> AnyReportKind for K {
    fn name(&self) -> &'static str {
        ReportKind::name(self)
    }

    fn about(&self) -> &'static str {
        ReportKind::about(self)
    }

    fn diagnostic(&self) -> bool {
        ReportKind::diagnostic(self)
    }

    fn params_schema(&self) -> ParamsSchema {
        let mut schemas = vec![(K::Body::name().into_owned(), K::Body::schema())];
        K::Body::schemas(&mut schemas);
        ParamsSchema {
            name: K::Body::name().into_owned(),
            schemas,
        }
    }

    fn refused_when(&self) -> Option<&'static str> {
        ReportKind::refused_when(self)
    }

    fn max_attempts(&self) -> i64 {
        ReportKind::max_attempts(self)
    }

    fn timeout(&self) -> Duration {
        ReportKind::timeout(self)
    }

    fn accept(&self, params: RawParams<'_>) -> Result<Value, ParamsError> {
        let (body, _) = decode_and_check(self, params)?;
        serde_json::to_value(&body).map_err(|e| ParamsError::Malformed(e.to_string()))
    }

    fn run<'a>(&'a self, ctx: &'a JobContext, params: Value) -> BoxFuture<'a, RunResult> {
        match decode_and_check(self, RawParams::Stored(&params)) {
            Ok((_, params)) => ReportKind::run(self, ctx, params),
            Err(error) => Box::pin(std::future::ready(Err(error.into()))),
        }
    }

    fn step_names(&self) -> Vec<&'static str> {
        ReportKind::step_names(self)
    }

    fn refuse_submit<'a>(
        &'a self,
        store: &'a store::Store,
        tenant_id: &'a str,
        params: &'a Value,
    ) -> BoxFuture<'a, store::Result<Option<String>>> {
        ReportKind::refuse_submit(self, store, tenant_id, params)
    }

    fn chunk_renderer(
        &self,
        params: &Value,
        format: ResultFormat,
    ) -> Option<Box<dyn ChunkRenderer>> {
        let (_, params) = decode_and_check(self, RawParams::Stored(params)).ok()?;
        ReportKind::chunk_renderer(self, &params, format)
    }
}

/// Parameters decoded into the kind's body, and checked.
fn decode_and_check<K: ReportKind>(
    kind: &K,
    params: RawParams<'_>,
) -> Result<(K::Body, K::Params), ParamsError> {
    let body: K::Body = decode_params(params)?;
    let checked = kind.check(&body)?;
    Ok((body, checked))
}

/// A kind's parameters as the OpenAPI document shows them.
pub struct ParamsSchema {
    /// The name the schema is shown under (`GstSummaryParams`); kinds that
    /// take the same parameters share it.
    pub name: String,
    /// The schema under that name first, then any it refers to.
    pub schemas: Vec<(String, RefOr<Schema>)>,
}

/// Parameters to decode: a request's body as sent, or parameters stored
/// with a job.
#[derive(Debug, Clone, Copy)]
pub enum RawParams<'a> {
    /// Read straight into the kind's schema, never into a generic JSON
    /// tree first: a body's memory is then bounded by the schema, not by
    /// how many values the body holds.
    Request(&'a [u8]),
    Stored(&'a Value),
}

fn malformed(error: serde_json::Error) -> ParamsError {
    ParamsError::Malformed(if error.is_syntax() || error.is_eof() {
        format!("the body is not valid JSON: {error}")
    } else {
        error.to_string()
    })
}

/// Decodes a closed parameter schema, mapping serde's complaint to a 400.
/// Fields are decoded only as far as their JSON type (a number as a
/// [`Number`], a date as a string), so that a value of the right type that
/// makes no sense is left for the kind's checks: a 422 naming the field.
fn decode_params<T: DeserializeOwned>(params: RawParams<'_>) -> Result<T, ParamsError> {
    match params {
        RawParams::Request(body) => {
            let mut reader = serde_json::Deserializer::from_slice(body);
            let ObjectOnly(decoded) =
                ObjectOnly::<T>::deserialize(&mut reader).map_err(malformed)?;
            reader.end().map_err(malformed)?;
            Ok(decoded)
        }
        RawParams::Stored(params) => {
            // serde's derive also reads a struct from an array of its fields in
            // order (`["2026-10"]`); parameters are always an object.
            if !params.is_object() {
                return Err(ParamsError::Malformed(
                    "the parameters must be a JSON object".into(),
                ));
            }
            T::deserialize(params).map_err(|e| ParamsError::Malformed(e.to_string()))
        }
    }
}

/// A `T` read only from a JSON object: serde's derive also reads a struct
/// from an array of its fields in order (`["2026-10"]`), which no schema
/// of this API allows.
pub struct ObjectOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Object(PhantomData))
            .map(ObjectOnly)
    }
}

/// A JSON number that must be a whole number from 0 to `max`; otherwise a
/// field error (and 0, which is never used: the errors refuse the request).
pub fn whole_number(field: &str, number: &Number, max: u64, errors: &mut Vec<FieldError>) -> u64 {
    match number.as_u64().filter(|n| *n <= max) {
        Some(n) => n,
        None => {
            errors.push(FieldError::new(
                field,
                format!("must be a whole number from 0 to {max}"),
            ));
            0
        }
    }
}

/// Every kind there is, one line each.
static KINDS: &[&dyn AnyReportKind] = &[
    &GstSummary,
    &LedgerExport,
    &saga::SagaKind(PeriodClose),
    &Sleep,
];

/// The kinds this process serves.
#[derive(Clone)]
pub struct Registry {
    kinds: BTreeMap<&'static str, &'static dyn AnyReportKind>,
}

impl Registry {
    /// The kinds a process serves: every one, but the diagnostic kinds
    /// only when they are enabled.
    pub fn new(enable_diagnostic_kinds: bool) -> Self {
        Self::of(
            KINDS
                .iter()
                .filter(|kind| enable_diagnostic_kinds || !kind.diagnostic()),
        )
    }

    /// Every kind, diagnostic ones included: what the OpenAPI document
    /// describes, whatever a process serves.
    pub fn all() -> Self {
        Self::of(KINDS.iter())
    }

    fn of<'a>(kinds: impl Iterator<Item = &'a &'static dyn AnyReportKind>) -> Self {
        Self {
            kinds: kinds.map(|kind| (kind.name(), *kind)).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&'static dyn AnyReportKind> {
        self.kinds.get(name).copied()
    }

    /// The kinds' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.kinds.keys().copied()
    }

    /// The kinds, in the order of their names.
    pub fn kinds(&self) -> impl Iterator<Item = &'static dyn AnyReportKind> + '_ {
        self.kinds.values().copied()
    }

    /// Refuses `MAX_RUNNING_PER_KIND` caps of kinds that do not exist: a
    /// misspelt kind would cap nothing.
    pub fn check_caps(caps: &shared::settings::Caps) -> Result<(), String> {
        let all = Self::all();
        match caps
            .per_kind
            .iter()
            .find(|(kind, _)| all.get(kind).is_none())
        {
            Some((kind, _)) => Err(format!(
                "MAX_RUNNING_PER_KIND names {kind:?}, which is no report kind ({})",
                all.names().collect::<Vec<_>>().join(", ")
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, sync::Arc};

    use super::{JobFailure, KINDS, Registry};
    use store::Error;

    #[test]
    fn each_kind_has_its_own_name_and_diagnostic_kinds_are_served_only_when_enabled() {
        let names: BTreeSet<&str> = KINDS.iter().map(|kind| kind.name()).collect();
        let diagnostic: Vec<&str> = Registry::all()
            .kinds()
            .filter(|kind| kind.diagnostic())
            .map(|kind| kind.name())
            .collect();

        assert_eq!(names.len(), KINDS.len(), "two kinds share a name");
        assert_eq!(diagnostic, ["sleep"]);
        assert!(Registry::new(false).get("sleep").is_none());
        assert!(Registry::new(true).get("sleep").is_some());
        assert_eq!(Registry::new(true).names().count(), KINDS.len());
    }

    fn is_retryable(error: Error) -> bool {
        match JobFailure::from(error) {
            JobFailure::Retryable { .. } => true,
            JobFailure::Permanent { .. } => false,
            other => panic!("a store error became {other:?}"),
        }
    }

    #[test]
    fn a_store_outage_in_a_handler_retries_and_a_bug_fails_for_good() {
        assert!(is_retryable(Error::from(sqlx::Error::PoolTimedOut)));
        assert!(is_retryable(Error::Batch(Arc::new(Error::from(
            sqlx::Error::PoolTimedOut
        )))));
        assert!(!is_retryable(Error::Corrupt("stored headers".into())));
        assert!(!is_retryable(Error::from(sqlx::Error::RowNotFound)));
        assert!(!is_retryable(Error::Batch(Arc::new(Error::Corrupt(
            "a batch of 2 writes answered 1".into()
        )))));
    }
}
