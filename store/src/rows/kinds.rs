//! Registered kinds: the rows its statements read and write.

use crate::sql::{JsonText, Millis};

/// A registered kind's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KindRow {
    pub(crate) tenant_id: String,
    pub(crate) name: String,
    pub(crate) about: String,
    pub(crate) params_schema: JsonText,
    pub(crate) timeout_ms: i64,
    pub(crate) max_attempts: i64,
    pub(crate) result_media_types: JsonText,
    pub(crate) max_running: Option<i64>,
    pub(crate) priority: String,
    pub(crate) created_at: Millis,
    pub(crate) updated_at: Millis,
    pub(crate) deleted_at: Option<Millis>,
}
