//! The audit log: who changed what in a tenant's setup, and when. Every
//! entry is written by [`Store::audit`] inside the transaction of the
//! change it records, so a change without its entry cannot be committed;
//! a change answered again from its idempotency key writes none.

use shared::{ids::new_id, time::now_ms};

use crate::{
    Result, Store, WriteTx, on_pool, on_tx, postgres,
    rows::audit::{AuditQuery, AuditRow},
    sql::Millis,
    sqlite,
};

/// Entries deleted in one statement by [`Store::prune_audit`].
const PRUNE_BATCH: i64 = 1_000;

/// What an entry records. The names are part of the API (`GET
/// /v1/audit?action=`), so one never changes meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    KeyCreated,
    KeyRevoked,
    WebhookRegistered,
    WebhookEnabled,
    WebhookSecretRotated,
    WebhookDeleted,
    ScheduleCreated,
    ScheduleChanged,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    FilingEndpointSet,
    PeriodClosed,
    PeriodReopened,
    KindRegistered,
    KindDeleted,
    SecretsRotated,
}

impl AuditAction {
    pub const ALL: [AuditAction; 17] = [
        AuditAction::KeyCreated,
        AuditAction::KeyRevoked,
        AuditAction::WebhookRegistered,
        AuditAction::WebhookEnabled,
        AuditAction::WebhookSecretRotated,
        AuditAction::WebhookDeleted,
        AuditAction::ScheduleCreated,
        AuditAction::ScheduleChanged,
        AuditAction::SchedulePaused,
        AuditAction::ScheduleResumed,
        AuditAction::ScheduleDeleted,
        AuditAction::FilingEndpointSet,
        AuditAction::PeriodClosed,
        AuditAction::PeriodReopened,
        AuditAction::KindRegistered,
        AuditAction::KindDeleted,
        AuditAction::SecretsRotated,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AuditAction::KeyCreated => "key.created",
            AuditAction::KeyRevoked => "key.revoked",
            AuditAction::WebhookRegistered => "webhook.registered",
            AuditAction::WebhookEnabled => "webhook.enabled",
            AuditAction::WebhookSecretRotated => "webhook.secret_rotated",
            AuditAction::WebhookDeleted => "webhook.deleted",
            AuditAction::ScheduleCreated => "schedule.created",
            AuditAction::ScheduleChanged => "schedule.changed",
            AuditAction::SchedulePaused => "schedule.paused",
            AuditAction::ScheduleResumed => "schedule.resumed",
            AuditAction::ScheduleDeleted => "schedule.deleted",
            AuditAction::FilingEndpointSet => "filing_endpoint.set",
            AuditAction::PeriodClosed => "period.closed",
            AuditAction::PeriodReopened => "period.reopened",
            AuditAction::KindRegistered => "kind.registered",
            AuditAction::KindDeleted => "kind.deleted",
            AuditAction::SecretsRotated => "secrets.rotated",
        }
    }

    pub fn parse(name: &str) -> Option<AuditAction> {
        AuditAction::ALL
            .into_iter()
            .find(|action| action.name() == name)
    }
}

/// Who makes a change: a key (through the API or the dashboard), a job
/// (a `period-close` closing its month), or a command run by an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Key {
        key_id: String,
        /// The request's id (`X-Request-Id` of its answer).
        request_id: String,
    },
    Job {
        job_id: String,
    },
    /// `api keys create`, `api secrets rotate`, ...: the command's words.
    Command(&'static str),
}

/// One change, as [`Store::audit`] records it.
#[derive(Debug, Clone)]
pub struct AuditChange<'a> {
    /// `None`: the whole deployment (every tenant's admin sees it).
    pub tenant_id: Option<&'a str>,
    pub action: AuditAction,
    /// The id of what changed: a key id, webhook id, schedule id, month,
    /// kind name.
    pub target: Option<&'a str>,
    /// What else there is to know, never a secret.
    pub details: serde_json::Value,
}

/// An entry as `GET /v1/audit` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub entry_id: String,
    pub tenant_id: Option<String>,
    pub at: i64,
    /// `key`, `job` or `command`.
    pub actor: String,
    pub key_id: Option<String>,
    pub job_id: Option<String>,
    /// The request's id; for a command, its words.
    pub request_id: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub details: serde_json::Value,
}

impl From<AuditRow> for AuditEntry {
    fn from(row: AuditRow) -> Self {
        AuditEntry {
            entry_id: row.entry_id,
            tenant_id: row.tenant_id,
            at: row.at.into(),
            actor: row.actor,
            key_id: row.key_id,
            job_id: row.job_id,
            request_id: row.request_id,
            action: row.action,
            target: row.target,
            details: serde_json::from_str(&row.details).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// Filters and page of `GET /v1/audit`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub action: Option<AuditAction>,
    /// Entries at or after this time (unix ms).
    pub since: Option<i64>,
    /// Entries before this time (unix ms).
    pub until: Option<i64>,
    /// Entries older than this one (the cursor).
    pub before: Option<String>,
    pub limit: i64,
}

impl Store {
    /// Records a change, in the transaction that makes it.
    pub async fn audit(
        &self,
        tx: &mut WriteTx,
        actor: &Actor,
        change: &AuditChange<'_>,
    ) -> Result<()> {
        let (actor_name, key_id, job_id, request_id) = match actor {
            Actor::Key { key_id, request_id } => {
                ("key", Some(key_id.clone()), None, Some(request_id.clone()))
            }
            Actor::Job { job_id } => ("job", None, Some(job_id.clone()), None),
            Actor::Command(words) => ("command", None, None, Some((*words).to_owned())),
        };
        let row = AuditRow {
            entry_id: new_id("aud_"),
            tenant_id: change.tenant_id.map(str::to_owned),
            at: Millis(now_ms()),
            actor: actor_name.to_owned(),
            key_id,
            job_id,
            request_id,
            action: change.action.name().to_owned(),
            target: change.target.map(str::to_owned),
            details: change.details.to_string(),
        };
        on_tx!(tx,
            conn => postgres::audit::insert(conn, &row).await?,
            conn => sqlite::audit::insert(conn, &row).await?,
        );
        Ok(())
    }

    /// The tenant's entries and the deployment's, newest first, one more
    /// than `filter.limit` to tell whether a next page exists.
    pub async fn list_audit(
        &self,
        tenant_id: &str,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditEntry>> {
        let query = AuditQuery {
            tenant_id,
            action: filter.action.map(AuditAction::name),
            since: filter.since.map(Millis),
            until: filter.until.map(Millis),
            before: filter.before.as_deref().unwrap_or("~"),
            limit: filter.limit + 1,
        };
        let rows = on_pool!(self,
            pool => postgres::audit::list(pool, &query).await?,
            pool => sqlite::audit::list(pool, &query).await?,
        );
        Ok(rows.into_iter().map(AuditEntry::from).collect())
    }

    /// Deletes the entries written before `before` (unix ms), a batch per
    /// transaction; returns how many.
    pub async fn prune_audit(&self, before: i64) -> Result<u64> {
        let mut pruned = 0;
        loop {
            let mut tx = self.begin_write().await?;
            let deleted = on_tx!(tx,
                conn => postgres::audit::prune(conn, Millis(before), PRUNE_BATCH).await?,
                conn => sqlite::audit::prune(conn, Millis(before), PRUNE_BATCH).await?,
            );
            tx.commit().await?;
            pruned += deleted;
            if deleted < PRUNE_BATCH as u64 {
                return Ok(pruned);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_parses_back_from_its_name() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.name()), Some(action));
        }
        assert_eq!(AuditAction::parse("key.made"), None);
    }
}
