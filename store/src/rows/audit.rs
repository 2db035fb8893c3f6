//! The audit log: the rows its statements read and write.

use crate::sql::Millis;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AuditRow {
    pub(crate) entry_id: String,
    pub(crate) tenant_id: Option<String>,
    pub(crate) at: Millis,
    pub(crate) actor: String,
    pub(crate) key_id: Option<String>,
    pub(crate) job_id: Option<String>,
    pub(crate) request_id: Option<String>,
    pub(crate) action: String,
    pub(crate) target: Option<String>,
    pub(crate) details: String,
}

/// What a page of `GET /v1/audit` asks for.
pub(crate) struct AuditQuery<'a> {
    pub(crate) tenant_id: &'a str,
    pub(crate) action: Option<&'a str>,
    pub(crate) since: Option<Millis>,
    pub(crate) until: Option<Millis>,
    /// Entries older than this one (the cursor); `~` sorts above every id.
    pub(crate) before: &'a str,
    pub(crate) limit: i64,
}
