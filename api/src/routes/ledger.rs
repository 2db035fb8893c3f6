use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::{Deserialize, Serialize};
use shared::{
    ledger::{FieldError, LedgerEntry, LedgerEntryInput},
    store::{ImportOutcome, WriteTx},
};
use utoipa::ToSchema;

use crate::{
    auth::Tenant,
    body::json_body,
    error::{ApiError, ApiResult},
    idempotency::{Answer, IdempotencyKey, execute},
    state::AppState,
};

/// Entries one import may carry.
pub const MAX_ENTRIES: usize = 10_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    pub entries: Vec<LedgerEntryInput>,
}

#[derive(Serialize, ToSchema)]
pub struct ImportResponse {
    pub inserted: usize,
    pub skipped: usize,
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
    security(("bearer" = []))
)]
pub async fn import(
    tenant: Tenant,
    key: IdempotencyKey,
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let import: serde_json::Value = json_body(&request, &body)?;
    // serde's derive also reads a struct from an array of its fields in
    // order; the body and each entry must be objects.
    let objects = import.is_object()
        && import["entries"]
            .as_array()
            .is_none_or(|entries| entries.iter().all(serde_json::Value::is_object));
    if !objects {
        return Err(ApiError::BadRequest(
            "the body must be {\"entries\": [...]}, each entry an object".into(),
        ));
    }
    let import = ImportRequest::deserialize(&import).map_err(|e| {
        ApiError::BadRequest(format!("the body is not valid JSON for this route: {e}"))
    })?;
    let entries = validate(&import.entries)?;
    let response = execute(&state, &tenant.0, &key, &request, &body, async |tx| {
        import_validated(&state, tx, &tenant.0, &entries).await
    })
    .await?;
    Ok(response)
}

async fn import_validated(
    state: &AppState,
    tx: &mut WriteTx,
    tenant_id: &str,
    entries: &[LedgerEntry],
) -> ApiResult<Answer> {
    // In the import's transaction, under each month's shared lock: a
    // period-close that locks a month waits for this import, and one that
    // locked it first refuses it (`Store::periods_refusing_imports`).
    let months: Vec<String> = entries.iter().map(|e| e.date[..7].to_owned()).collect();
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

/// Every entry valid, at most [`MAX_ENTRIES`], and an id repeated within
/// the batch only with the same content (then stored once).
fn validate(inputs: &[LedgerEntryInput]) -> ApiResult<Vec<LedgerEntry>> {
    if inputs.len() > MAX_ENTRIES {
        return Err(ApiError::validation(
            "entries",
            format!(
                "must hold at most {MAX_ENTRIES} entries, not {}",
                inputs.len()
            ),
        ));
    }
    let mut errors = Vec::new();
    let mut entries: Vec<LedgerEntry> = Vec::with_capacity(inputs.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        match input.validate(&format!("entries[{i}]")) {
            Ok(entry) => match seen.get(input.id.as_str()) {
                Some(&first) if entries[first] != entry => errors.push(FieldError::new(
                    format!("entries[{i}].id"),
                    format!("repeats the id of entries[{first}] with different content"),
                )),
                Some(_) => {}
                None => {
                    seen.insert(&input.id, entries.len());
                    entries.push(entry);
                }
            },
            Err(mut field_errors) => errors.append(&mut field_errors),
        }
    }
    if errors.is_empty() {
        Ok(entries)
    } else {
        Err(ApiError::Validation {
            detail: format!(
                "{} problem(s) in the entries; nothing was imported",
                errors.len()
            ),
            errors,
        })
    }
}
