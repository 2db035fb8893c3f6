//! Months and the filing endpoint: the rows its statements read and write.

use crate::rows::secrets::StoredSecret;
use crate::sql::Millis;

/// A month's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PeriodRow {
    pub(crate) month: String,
    pub(crate) state: String,
    pub(crate) job_id: String,
    pub(crate) locked_at: Millis,
    pub(crate) closed_at: Option<Millis>,
    pub(crate) filing_reference: Option<String>,
}

/// A filing endpoint's row, as both databases' statements return it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EndpointRow {
    pub(crate) url: String,
    pub(crate) secret: Option<String>,
    pub(crate) sealed_secret: Option<String>,
    pub(crate) secret_key_id: Option<String>,
    pub(crate) created_at: Millis,
    pub(crate) updated_at: Millis,
}

impl EndpointRow {
    pub(crate) fn stored_secret(&self) -> StoredSecret {
        StoredSecret {
            secret: self.secret.clone(),
            sealed_secret: self.sealed_secret.clone(),
            secret_key_id: self.secret_key_id.clone(),
        }
    }
}
