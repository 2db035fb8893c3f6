//! How statements are written, and the values whose column type differs
//! between the two databases.

/// A statement's text. Always a literal: `tests/statements.rs` finds every
/// `sql!` of `src/postgres/` and `src/sqlite/` and prepares it against a
/// freshly migrated database of its kind.
macro_rules! sql {
    ($text:literal) => {
        $text
    };
}

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::value::RawValue;
use shared::calendar::Date;
use sqlx::{
    Decode, Encode, Postgres, Sqlite, Type,
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef},
    sqlite::{SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef},
    types::Json,
};

/// A moment, in the unix milliseconds the rest of Receipt counts in:
/// `timestamptz` on Postgres, an integer on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Millis(pub i64);

impl Millis {
    fn to_datetime(self) -> Result<DateTime<Utc>, BoxDynError> {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .ok_or_else(|| format!("{} ms is out of range for a timestamp", self.0).into())
    }
}

impl From<Millis> for i64 {
    fn from(millis: Millis) -> Self {
        millis.0
    }
}

impl Type<Postgres> for Millis {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl PgHasArrayType for Millis {
    fn array_type_info() -> PgTypeInfo {
        <DateTime<Utc> as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for Millis {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<Postgres>>::encode(self.to_datetime()?, buf)
    }
}

impl Decode<'_, Postgres> for Millis {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let at = <DateTime<Utc> as Decode<Postgres>>::decode(value)?;
        Ok(Millis(at.timestamp_millis()))
    }
}

impl Type<Sqlite> for Millis {
    fn type_info() -> SqliteTypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for Millis {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<Sqlite>>::encode(self.0, buf)
    }
}

impl Decode<'_, Sqlite> for Millis {
    fn decode(value: SqliteValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(Millis(<i64 as Decode<Sqlite>>::decode(value)?))
    }
}

/// A JSON document kept as its text: `jsonb` on Postgres (which stores it
/// parsed, so the text read back is Postgres's rendering of the same
/// value), `TEXT` on SQLite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonText(pub String);

impl From<JsonText> for String {
    fn from(json: JsonText) -> Self {
        json.0
    }
}

impl Type<Postgres> for JsonText {
    fn type_info() -> PgTypeInfo {
        <Json<Box<RawValue>> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Json<Box<RawValue>> as Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for JsonText {
    fn array_type_info() -> PgTypeInfo {
        <Json<Box<RawValue>> as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for JsonText {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let raw: &RawValue = serde_json::from_str(&self.0)?;
        <Json<&RawValue> as Encode<Postgres>>::encode(Json(raw), buf)
    }
}

impl Decode<'_, Postgres> for JsonText {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let Json(raw) = <Json<Box<RawValue>> as Decode<Postgres>>::decode(value)?;
        Ok(JsonText(raw.get().to_owned()))
    }
}

impl Type<Sqlite> for JsonText {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for JsonText {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        <String as Encode<Sqlite>>::encode(self.0.clone(), buf)
    }
}

impl Decode<'_, Sqlite> for JsonText {
    fn decode(value: SqliteValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(JsonText(<String as Decode<Sqlite>>::decode(value)?))
    }
}

/// A calendar date as its text, `YYYY-MM-DD`: `date` on Postgres, `TEXT`
/// on SQLite. Postgres refuses text that is no date, as its column would;
/// SQLite keeps the text as it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DateText(pub String);

impl DateText {
    fn to_naive(&self) -> Result<NaiveDate, BoxDynError> {
        Date::parse(&self.0)
            .map(Date::naive)
            .ok_or_else(|| format!("{:?} is not a date written YYYY-MM-DD", self.0).into())
    }
}

impl From<DateText> for String {
    fn from(date: DateText) -> Self {
        date.0
    }
}

impl Type<Postgres> for DateText {
    fn type_info() -> PgTypeInfo {
        <NaiveDate as Type<Postgres>>::type_info()
    }
}

impl PgHasArrayType for DateText {
    fn array_type_info() -> PgTypeInfo {
        <NaiveDate as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for DateText {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <NaiveDate as Encode<Postgres>>::encode(self.to_naive()?, buf)
    }
}

impl Decode<'_, Postgres> for DateText {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let day = <NaiveDate as Decode<Postgres>>::decode(value)?;
        let date = Date::from_naive(day)
            .ok_or_else(|| format!("{day} is outside the years 0000 to 9999"))?;
        Ok(DateText(date.to_string()))
    }
}

impl Type<Sqlite> for DateText {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for DateText {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        <String as Encode<Sqlite>>::encode(self.0.clone(), buf)
    }
}

impl Decode<'_, Sqlite> for DateText {
    fn decode(value: SqliteValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(DateText(<String as Decode<Sqlite>>::decode(value)?))
    }
}

/// A webhook's event types: `text[]` on Postgres; on SQLite one text with
/// a comma on each side of each type (`,job.failed,job.succeeded,`), so
/// that no type is found inside another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventTypes(pub Vec<String>);

impl EventTypes {
    /// SQLite's form of these types.
    pub(crate) fn sqlite_text(types: &[String]) -> String {
        format!(",{},", types.join(","))
    }
}

impl From<EventTypes> for Vec<String> {
    fn from(types: EventTypes) -> Self {
        types.0
    }
}

impl Type<Postgres> for EventTypes {
    fn type_info() -> PgTypeInfo {
        <Vec<String> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Vec<String> as Type<Postgres>>::compatible(ty)
    }
}

impl Decode<'_, Postgres> for EventTypes {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        Ok(EventTypes(<Vec<String> as Decode<Postgres>>::decode(
            value,
        )?))
    }
}

impl Type<Sqlite> for EventTypes {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl Decode<'_, Sqlite> for EventTypes {
    fn decode(value: SqliteValueRef<'_>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Sqlite>>::decode(value)?;
        Ok(EventTypes(
            text.split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
        ))
    }
}
