//! Reading a JSON body in the order the error table of `docs/api.md`
//! implies: the size limit (413, by actix's payload config), then the media
//! type (415), then the JSON itself (400). Validation (422) is the
//! handler's.

use actix_web::{HttpRequest, http::header, web::Bytes};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ApiResult};

/// The body as `T`, if it is `application/json` and decodes. `T` is the
/// route's typed schema, read straight from the bytes: never a generic JSON
/// tree, whose size grows with the number of values a body holds.
pub fn json_body<T: DeserializeOwned>(request: &HttpRequest, body: &Bytes) -> ApiResult<T> {
    json_media_type(request)?;
    serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!("the body is not valid JSON for this route: {e}"))
    })
}

/// Refuses a body that is not `application/json` (415).
pub fn json_media_type(request: &HttpRequest) -> ApiResult<()> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::UnsupportedMediaType(if media_type.is_empty() {
            "the body must be application/json; no Content-Type was sent".to_owned()
        } else {
            format!("the body must be application/json, not {media_type}")
        }));
    }
    Ok(())
}
