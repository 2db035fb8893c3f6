//! The `Idempotency-Key` layer every POST goes through, written once.
//!
//! A handler validates its input first (refusals store nothing), then hands
//! its effect to [`execute`], which runs it in one transaction with the
//! key's lookup and the stored response: a retried request replays the
//! first answer byte for byte, a concurrent one waits for the first to
//! commit and replays it, and a request with another body under the same
//! key is refused with 422. Submits take the same steps in groups
//! (`crate::submits::submit`).

use actix_web::{
    FromRequest, HttpRequest, HttpResponse, ResponseError,
    dev::Payload,
    http::{StatusCode, header},
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use store::{KeyLookup, StoredResponse, WriteTx};

use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};

pub const HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The request's `Idempotency-Key`, if it sent one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(pub Option<String>);

/// A key as `docs/api.md` allows it: 1 to 255 visible ASCII characters,
/// bare or as a structured-field string (`"abc"`, with `\"` and `\\`
/// escapes).
pub fn parse_key(raw: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| "the Idempotency-Key is not ASCII".to_owned())?
        .trim_matches([' ', '\t']);
    // A leading quote starts a structured-field string, which must close.
    let key = if text.starts_with('"') {
        if text.len() < 2 || !text.ends_with('"') {
            return Err("the quoted Idempotency-Key has no closing quote".into());
        }
        let mut key = String::with_capacity(text.len());
        let mut chars = text[1..text.len() - 1].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(escaped @ ('"' | '\\')) => key.push(escaped),
                    _ => return Err("the quoted Idempotency-Key has a bad escape".into()),
                },
                '"' => return Err("the quoted Idempotency-Key has an unescaped quote".into()),
                other => key.push(other),
            }
        }
        key
    } else {
        text.to_owned()
    };
    if key.is_empty() || key.len() > 255 {
        return Err("the Idempotency-Key must be 1 to 255 characters".into());
    }
    if !key.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return Err("the Idempotency-Key may hold only visible ASCII characters (! to ~)".into());
    }
    Ok(key)
}

impl FromRequest for IdempotencyKey {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let mut values = request.headers().get_all(HEADER);
        let result = match (values.next(), values.next()) {
            (None, _) => Ok(IdempotencyKey(None)),
            (Some(_), Some(_)) => Err(ApiError::BadRequest(
                "send one Idempotency-Key header, not several".into(),
            )),
            (Some(value), None) => parse_key(value.as_bytes())
                .map(|key| IdempotencyKey(Some(key)))
                .map_err(ApiError::BadRequest),
        };
        std::future::ready(result)
    }
}

/// A request's body, as its fingerprint reads it.
#[derive(Debug, Clone, Copy)]
pub enum RequestBody<'a> {
    /// As sent: read as JSON only when a key asks for the fingerprint
    /// (a body that is no JSON counts as its text).
    Sent(&'a [u8]),
    /// Decoded by the handler already, and written by
    /// [`canonical_json`]: a body sent in any key order or spacing
    /// comes to the same text.
    Canonical(&'a str),
}

/// What identifies "the same request": method, path, query, and the body as
/// canonical JSON (key order and white space do not count).
pub fn fingerprint(request: &HttpRequest, body: RequestBody<'_>) -> String {
    let mut hasher = Sha256::new()
        .chain_update(request.method().as_str())
        .chain_update(b"\n")
        .chain_update(request.path())
        .chain_update(b"\n");
    // A submit's start (`run_at`, `delay`) is in its query: the same body
    // at another time is another request. A request without a query keeps
    // the fingerprint it always had.
    if !request.query_string().is_empty() {
        hasher.update(request.query_string());
        hasher.update(b"\n");
    }
    match body {
        RequestBody::Canonical(text) => hasher.update(text),
        RequestBody::Sent(body) => match serde_json::from_slice::<Value>(body) {
            Ok(value) => hasher.update(canonical_json(&value)),
            Err(_) => hasher.update(String::from_utf8_lossy(body).as_bytes()),
        },
    }
    hex::encode(hasher.finalize())
}

/// `value` as canonical JSON: object keys sorted at every level, no white
/// space.
pub fn canonical_json(value: &Value) -> String {
    let mut canonical = Vec::new();
    write_canonical(value, &mut canonical);
    // JSON written from a `Value` is UTF-8.
    String::from_utf8(canonical).unwrap_or_default()
}

/// JSON with object keys sorted at every level and no white space, into
/// one buffer, without a string per member.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (n, (key, value)) in entries.into_iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_compact(key, out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        other => write_compact(other, out),
    }
}

/// Compact JSON, as `Value`'s `Display` writes it.
fn write_compact(value: &impl serde::Serialize, out: &mut Vec<u8>) {
    // Writing a string or scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// An answer an effect produced: sent now, and stored against the key.
#[derive(Debug, Clone)]
pub struct Answer(pub StoredResponse);

impl Answer {
    pub fn json(
        status: StatusCode,
        body: &impl serde::Serialize,
        headers: Vec<(String, String)>,
    ) -> ApiResult<Self> {
        let body = serde_json::to_vec(body).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut all = vec![(
            header::CONTENT_TYPE.to_string(),
            "application/json".to_owned(),
        )];
        all.extend(headers);
        Ok(Answer(StoredResponse {
            status: status.as_u16(),
            headers: all,
            body,
        }))
    }

    /// The answer of a client error the effect ended with.
    fn from_error(error: &ApiError) -> Self {
        let (status, headers, body) = error.parts();
        Answer(StoredResponse {
            status: status.as_u16(),
            headers,
            body,
        })
    }

    pub(crate) fn into_response(self, replayed: bool) -> HttpResponse {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut builder = HttpResponse::build(status);
        for (name, value) in self.0.headers {
            builder.insert_header((name, value));
        }
        if replayed {
            builder.insert_header((REPLAYED_HEADER, "true"));
        }
        builder.body(self.0.body)
    }
}

/// Adds a secret (a webhook's signing secret) to a JSON answer that
/// [`execute`] stored without it, so that no secret is kept in clear
/// under an `Idempotency-Key`: the answer just made gets `fresh`; a replay
/// gets what `reveal` reads anew from the answer's stored body (the
/// secret as it is now). An error answer is sent as it is.
pub async fn with_secret(
    response: HttpResponse,
    field: &str,
    fresh: Option<String>,
    reveal: impl AsyncFnOnce(&Value) -> ApiResult<Option<String>>,
) -> ApiResult<HttpResponse> {
    if !response.status().is_success() {
        return Ok(response);
    }
    let replayed = response.headers().contains_key(REPLAYED_HEADER);
    let status = response.status();
    let headers = response.headers().clone();
    let body = actix_web::body::to_bytes(response.into_body())
        .await
        .map_err(|e| ApiError::Internal(format!("reading a stored answer: {e}")))?;
    let mut object: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::Internal(format!("a stored answer is not JSON: {e}")))?;
    let secret = match fresh {
        Some(secret) if !replayed => Some(secret),
        _ => reveal(&object).await?,
    };
    if let (Some(secret), Value::Object(map)) = (secret, &mut object) {
        map.insert(field.to_owned(), Value::String(secret));
    }
    let mut answer = HttpResponse::build(status);
    for (name, value) in &headers {
        if name != header::CONTENT_LENGTH {
            answer.insert_header((name.clone(), value.clone()));
        }
    }
    Ok(answer.body(serde_json::to_vec(&object).map_err(|e| ApiError::Internal(e.to_string()))?))
}

/// What a request with an `Idempotency-Key` does next, by what its key
/// holds.
#[derive(Debug)]
pub enum NextStep {
    /// The key is new (or expired): run the effect and store its answer.
    Run,
    /// The same request was answered before: send that answer again.
    Replay(StoredResponse),
    /// The key cannot serve this request: answer with this problem.
    Refuse(ApiError),
}

impl NextStep {
    pub fn of(found: KeyLookup, key: &str) -> Self {
        match found {
            KeyLookup::New => NextStep::Run,
            KeyLookup::Replay(stored) => NextStep::Replay(stored),
            KeyLookup::Mismatch => NextStep::Refuse(ApiError::Validation {
                detail: format!(
                    "the Idempotency-Key {key:?} was used with a different request (method, path or body)"
                ),
                errors: vec![shared::ledger::FieldError::new(
                    "Idempotency-Key",
                    "was already used with a different request",
                )],
            }),
        }
    }

    /// The answer of a request whose effect does not run: the stored
    /// answer, or the refusal. `Run` is reached here only when the key was
    /// found taken and then its row vanished before it could be read (it
    /// expired and was swept): the client may simply retry.
    pub fn answer_without_running(self, key: &str) -> ApiResult<HttpResponse> {
        match self {
            NextStep::Replay(stored) => Ok(Answer(stored).into_response(true)),
            NextStep::Refuse(problem) => Err(problem),
            NextStep::Run => Err(ApiError::InProgress(format!(
                "the Idempotency-Key {key:?} is being processed; retry"
            ))),
        }
    }
}

/// Runs `effect` once per key. Without a key it simply runs, in a
/// transaction. A 5xx (an `Err` that is not a client error) rolls
/// everything back and stores nothing, so a retry runs again.
pub async fn execute<F>(
    state: &AppState,
    tenant_id: &str,
    key: &IdempotencyKey,
    request: &HttpRequest,
    body: RequestBody<'_>,
    effect: F,
) -> ApiResult<HttpResponse>
where
    F: AsyncFnOnce(&mut WriteTx) -> ApiResult<Answer>,
{
    let store = &state.store;
    let fingerprint = key.0.as_ref().map(|_| fingerprint(request, body));
    let mut tx = store.begin_write().await?;
    if let (Some(key), Some(fingerprint)) = (&key.0, &fingerprint) {
        let found = store
            .lookup_idempotency_key(&mut tx, tenant_id, key, fingerprint)
            .await?;
        match NextStep::of(found, key) {
            NextStep::Run => {}
            step => return step.answer_without_running(key),
        }
    }
    let answer = match effect(&mut tx).await {
        Ok(answer) => answer,
        // A limit's refusal changes nothing and is not kept under the
        // key: the same request may be sent again once below the limit.
        Err(error @ ApiError::TooManyRequests { .. }) => return Err(error),
        Err(error) if error.status_code().is_client_error() => Answer::from_error(&error),
        Err(error) => return Err(error),
    };
    if let (Some(key), Some(fingerprint)) = (&key.0, &fingerprint) {
        shared::failpoints::hold_until_file_exists("api::key_save_held_until", || {
            Ok::<(), ApiError>(())
        })
        .await?;
        let ttl = shared::time::duration_ms(state.idempotency_ttl);
        if !store
            .save_idempotency_key(&mut tx, tenant_id, key, fingerprint, ttl, &answer.0)
            .await?
        {
            // Another request with this key committed first: undo ours and
            // answer as it did.
            tx.rollback().await?;
            shared::failpoints::hold_until_file_exists("api::key_read_again_held_until", || {
                Ok::<(), ApiError>(())
            })
            .await?;
            let mut tx = store.begin_write().await?;
            let found = store
                .lookup_idempotency_key(&mut tx, tenant_id, key, fingerprint)
                .await?;
            return NextStep::of(found, key).answer_without_running(key);
        }
    }
    tx.commit().await?;
    Ok(answer.into_response(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_accepted_bare_or_quoted() {
        assert_eq!(parse_key(b"abc-123").unwrap(), "abc-123");
        assert_eq!(parse_key(b"\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(parse_key(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse_key(&[b'k'; 255]).unwrap().len(), 255);
    }

    #[test]
    fn keys_outside_visible_ascii_or_length_are_refused() {
        for bad in [
            &b""[..],
            b"\"\"",
            b"\"open",
            b"\"",
            b"a b",
            b"caf\xc3\xa9",
            b"tab\there",
            b"\"a\\nb\"",
            b"\"a\"b\"",
        ] {
            assert!(
                parse_key(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_key(&[b'k'; 256]).is_err());
    }

    #[test]
    fn canonical_json_is_compact_sorted_and_escaped_as_stored_fingerprints_expect() {
        let value: Value =
            serde_json::from_str(r#"{"b": "q\"\u0001é", "a": [1.5, {"d": null, "c": true}]}"#)
                .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":[1.5,{"c":true,"d":null}],"b":"q\"\u0001é"}"#
        );
    }

    #[test]
    fn canonical_json_ignores_key_order_and_space() {
        let a: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "s"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        let c: Value = serde_json::from_str(r#"{"a":"s","b":[{"x":1,"y":2},1]}"#).unwrap();
        assert_ne!(canonical_json(&a), canonical_json(&c));
    }
}
