//! The dashboard: the rows its statements read and write.

use crate::sql::Millis;

/// A session's row, as a sign-in writes it.
pub(crate) struct NewSessionRow<'a> {
    pub session_hash: String,
    pub tenant_id: &'a str,
    pub key_hash: &'a str,
    pub csrf_token: &'a str,
    pub created_at: Millis,
    pub expires_at: Millis,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SessionRow {
    pub(crate) tenant_id: String,
    pub(crate) key_hash: String,
    pub(crate) csrf_token: String,
    pub(crate) expires_at: Millis,
}

/// The tenant's jobs of one kind in one status.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CountRow {
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) n: i64,
}

/// The tenant's jobs that reached one final status in the minute that
/// starts at `start`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MinuteRow {
    pub(crate) start: Millis,
    pub(crate) status: String,
    pub(crate) n: i64,
}

/// One webhook's delivery attempts since a time, and how many got a 2xx.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct HealthRow {
    pub(crate) webhook_id: String,
    pub(crate) attempts: i64,
    pub(crate) ok: i64,
}

/// A webhook's latest failed attempt.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct FailureRow {
    pub(crate) attempted_at: Millis,
    pub(crate) response_status: Option<i64>,
    pub(crate) error: Option<String>,
}
