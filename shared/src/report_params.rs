//! The parameters of Receipt's built-in report kinds: the body of
//! `POST /v1/reports/{kind}` as the service decodes it and as the Rust
//! client sends it, one type for both. Each is a closed schema whose
//! fields are decoded only as far as their JSON type (a month as a
//! string, a count as a JSON number): a value of the right type that makes
//! no sense is then refused by the kind's checks with a 422 naming the
//! field, not with a 400 for the whole body.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Number;

/// The parameters of `gst-summary`.
// `period-close` takes the same: the document shows them once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GstSummaryParams {
    /// The month, `YYYY-MM` exactly.
    #[cfg_attr(feature = "openapi", schema(example = "2026-10"))]
    pub month: String,
}

/// The parameters of `ledger-export`: a range of dates, both inclusive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LedgerExportParams {
    /// The first day, `YYYY-MM-DD` exactly.
    #[cfg_attr(feature = "openapi", schema(example = "2026-10-01"))]
    pub from: String,
    /// The last day, `YYYY-MM-DD` exactly, not before `from`.
    #[cfg_attr(feature = "openapi", schema(example = "2026-10-31"))]
    pub to: String,
}

/// The parameters of `sleep`, a diagnostic kind (served only with
/// `ENABLE_DIAGNOSTIC_KINDS=true`).
// A field left out stays out, also of the parameters the job keeps and
// shows: `{"ms": 50}` is kept as sent, not with its defaults filled in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SleepParams {
    /// Milliseconds to sleep, 0 to 600000.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = u64, default = 0, maximum = 600_000, example = 50)
    )]
    pub ms: Option<Number>,
    /// How many of the first attempts fail.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = u64, default = 0))]
    pub fail_times: Option<Number>,
    /// The failures are permanent (no retry).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = bool, default = false))]
    pub permanent: Option<bool>,
}

/// A field that may be left out but, when present, is a `T`: `null` is
/// refused as `T` refuses it.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::SleepParams;

    #[test]
    fn sleep_params_keep_what_was_sent_and_refuse_null() {
        let sent = json!({"ms": 0, "permanent": true});
        let params: SleepParams = serde_json::from_value(sent.clone()).unwrap();

        assert_eq!(serde_json::to_value(&params).unwrap(), sent);
        assert_eq!(
            serde_json::to_value(SleepParams::default()).unwrap(),
            json!({})
        );
        assert!(serde_json::from_value::<SleepParams>(json!({"ms": null})).is_err());
    }
}
