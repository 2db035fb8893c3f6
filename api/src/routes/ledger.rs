use std::{
    collections::{BTreeSet, HashMap},
    fmt,
};

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use reports::ObjectOnly;
use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use shared::{
    calendar::Month,
    ledger::{FieldError, LedgerEntry, LedgerEntryInput},
};
use store::{ImportOutcome, WriteTx};
use utoipa::ToSchema;

pub use shared::objects::ImportResponse;

use crate::{
    auth::{Tenant, scope},
    body::json_media_type,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, RequestBody, execute},
    state::AppState,
};

/// Entries one import may carry.
pub const MAX_ENTRIES: usize = 10_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    pub entries: Vec<LedgerEntryInput>,
}

/// Import ledger entries, all or nothing; naturally idempotent by `id`.
#[utoipa::path(
    post, path = "/v1/ledger/entries", tag = "ledger", operation_id = "importLedgerEntries",
    request_body = ImportRequest,
    responses(
        (status = 200, body = ImportResponse),
        (status = 400, description = "malformed JSON, a wrong JSON type, an unknown field, or a malformed Idempotency-Key"),
        (status = 409, description = "known ids with different content (`ids` lists them; nothing stored), entries dated in a month that is closed or being closed (`detail` names it; nothing stored), or the Idempotency-Key is still in progress"),
        (status = 413, description = "body over 16 MiB"),
        (status = 415, description = "body not application/json"),
        (status = 422, description = "invalid entries (`errors` names each field; nothing stored), or the Idempotency-Key was used with a different request"),
    ),
    security(("bearer" = ["submit"]))
)]
pub async fn import(
    tenant: Tenant<scope::Submit>,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    json_media_type(&request)?;
    let import = read_import(&body)?;
    let response = execute(
        &state,
        &tenant.0,
        &key,
        &request,
        RequestBody::Sent(&body),
        async |tx| import_validated(&state, tx, &tenant.0, &import).await,
    )
    .await?;
    Ok(response)
}

async fn import_validated(
    state: &AppState,
    tx: &mut WriteTx,
    tenant_id: &str,
    import: &Reading,
) -> ApiResult<Answer> {
    // In the import's transaction, under each month's shared lock: a
    // period-close that locks a month waits for this import, and one that
    // locked it first refuses it (`Store::periods_refusing_imports`).
    let months: Vec<String> = import.months.iter().map(Month::to_string).collect();
    let entries = &import.entries;
    let refusing = state
        .store
        .periods_refusing_imports(tx, tenant_id, &months)
        .await?;
    if !refusing.is_empty() {
        let named: Vec<String> = refusing
            .iter()
            .map(|p| {
                let state = if p.state == "closed" {
                    "closed"
                } else {
                    "being closed"
                };
                format!("{} is {state} (by {})", p.month, p.job_id)
            })
            .collect();
        return Err(ApiError::Conflict {
            detail: format!(
                "month {}; entries dated in it cannot be imported (reopen a closed month with POST /v1/periods/{{month}}/reopen); nothing was imported",
                named.join(", month ")
            ),
            ids: None,
        });
    }
    match state.store.import_entries(tx, tenant_id, entries).await? {
        ImportOutcome::Imported { inserted, skipped } => Answer::json(
            StatusCode::OK,
            &ImportResponse { inserted, skipped },
            Vec::new(),
        ),
        ImportOutcome::Conflict { ids } => Err(ApiError::Conflict {
            detail: format!(
                "{} entr{} already stored with different content; nothing was imported",
                ids.len(),
                if ids.len() == 1 { "y is" } else { "ies are" }
            ),
            ids: Some(ids),
        }),
    }
}

/// An import as it is read: each entry is checked as soon as it is read
/// and only its checked form is kept, so memory follows the entries kept,
/// never the number of values the body holds.
#[derive(Default)]
struct Reading {
    /// Valid entries, an id repeated with the same content once.
    entries: Vec<LedgerEntry>,
    months: BTreeSet<Month>,
    /// Every problem of the first [`MAX_ENTRIES`] entries.
    errors: Vec<FieldError>,
    /// Where each id was first seen: the index of its entry in the request
    /// and in `entries`.
    seen: HashMap<String, (usize, usize)>,
    /// Entries in the body, counted on past [`MAX_ENTRIES`] without being read.
    count: usize,
}

impl Reading {
    fn add(&mut self, input: &LedgerEntryInput) {
        let i = self.count;
        match input.validate(&format!("entries[{i}]")) {
            Ok((entry, month)) => match self.seen.get(input.id.as_str()) {
                Some(&(first, at)) if self.entries[at] != entry => {
                    self.errors.push(FieldError::new(
                        format!("entries[{i}].id"),
                        format!("repeats the id of entries[{first}] with different content"),
                    ));
                }
                Some(_) => {}
                None => {
                    self.seen.insert(input.id.clone(), (i, self.entries.len()));
                    self.entries.push(entry);
                    self.months.insert(month);
                }
            },
            Err(mut field_errors) => self.errors.append(&mut field_errors),
        }
    }
}

/// Reads the body `{"entries": [...]}` into checked entries: every entry
/// valid, at most [`MAX_ENTRIES`], and an id repeated within the batch only
/// with the same content (then stored once).
fn read_import(body: &[u8]) -> ApiResult<Reading> {
    let mut reading = Reading::default();
    let mut reader = serde_json::Deserializer::from_slice(body);
    ImportSeed(&mut reading)
        .deserialize(&mut reader)
        .and_then(|()| reader.end())
        .map_err(|e| {
            ApiError::BadRequest(format!("the body is not valid JSON for this route: {e}"))
        })?;
    if reading.count > MAX_ENTRIES {
        return Err(ApiError::validation(
            "entries",
            format!(
                "must hold at most {MAX_ENTRIES} entries, not {}",
                reading.count
            ),
        ));
    }
    if !reading.errors.is_empty() {
        return Err(ApiError::Validation {
            detail: format!(
                "{} problem(s) in the entries; nothing was imported",
                reading.errors.len()
            ),
            errors: reading.errors,
        });
    }
    Ok(reading)
}

/// The body: an object whose one member is `entries`.
struct ImportSeed<'a>(&'a mut Reading);

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum ImportField {
    Entries,
}

impl<'de> DeserializeSeed<'de> for ImportSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ImportSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the body {\"entries\": [...]}, each entry an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut entries = false;
        while let Some(ImportField::Entries) = map.next_key()? {
            if entries {
                return Err(de::Error::duplicate_field("entries"));
            }
            entries = true;
            map.next_value_seed(EntriesSeed(&mut *self.0))?;
        }
        if entries {
            Ok(())
        } else {
            Err(de::Error::missing_field("entries"))
        }
    }
}

/// The `entries` array, read one entry at a time.
struct EntriesSeed<'a>(&'a mut Reading);

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            if self.0.count < MAX_ENTRIES {
                let Some(ObjectOnly(input)) = seq.next_element::<ObjectOnly<LedgerEntryInput>>()?
                else {
                    return Ok(());
                };
                self.0.add(&input);
            } else {
                // Past the cap nothing is kept: the rest is only counted,
                // for the 422, and must still be objects.
                let Some(ObjectOnly(IgnoredAny)) = seq.next_element::<ObjectOnly<IgnoredAny>>()?
                else {
                    return Ok(());
                };
            }
            self.0.count += 1;
        }
    }
}
