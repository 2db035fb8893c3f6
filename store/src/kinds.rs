//! Report kinds a tenant registers (`PUT /v1/kinds/{name}`), whose jobs
//! its own workers lease over HTTP. A deleted kind keeps its row, marked
//! deleted: submits of it are refused, and the jobs already made of it are
//! still leased with its timeout until none is left. Registering the name
//! again brings it back.

use shared::{model::Priority, time::now_ms};

use crate::{
    Actor, AuditAction, AuditChange, Error, Result, Store, on_pool, on_tx, postgres, sql::Millis,
    sqlite,
};

pub(crate) use crate::rows::kinds::KindRow;

/// A registered kind, as its tenant declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredKind {
    pub tenant_id: String,
    pub name: String,
    pub about: String,
    /// The JSON Schema (2020-12) of a submit's body, as JSON text.
    pub params_schema: String,
    pub timeout_ms: i64,
    pub max_attempts: i64,
    pub result_media_types: Vec<String>,
    /// How many jobs of the kind the tenant may run at once; `None`: no cap.
    pub max_running: Option<i64>,
    /// The priority of a submit that names none.
    pub priority: Priority,
    pub created_at: i64,
    pub updated_at: i64,
    /// When it was deleted, if it was.
    pub deleted_at: Option<i64>,
}

impl RegisteredKind {
    /// Whether two registrations declare the same kind (their times aside).
    /// The schemas are compared as JSON values: Postgres keeps them as
    /// `jsonb`, which does not keep their text.
    pub fn declares_the_same(&self, other: &RegisteredKind) -> bool {
        let timeless = |kind: &RegisteredKind| RegisteredKind {
            params_schema: String::new(),
            created_at: 0,
            updated_at: 0,
            deleted_at: None,
            ..kind.clone()
        };
        let schema = |kind: &RegisteredKind| {
            serde_json::from_str::<serde_json::Value>(&kind.params_schema).ok()
        };
        timeless(self) == timeless(other) && schema(self) == schema(other)
    }
}

impl TryFrom<KindRow> for RegisteredKind {
    type Error = Error;

    fn try_from(row: KindRow) -> Result<Self> {
        let result_media_types = serde_json::from_str(&row.result_media_types.0)
            .map_err(|e| Error::Corrupt(format!("the media types of kind {}: {e}", row.name)))?;
        let priority = Priority::parse(&row.priority)
            .ok_or_else(|| Error::Corrupt(format!("the priority of kind {}", row.name)))?;
        Ok(RegisteredKind {
            tenant_id: row.tenant_id,
            name: row.name,
            about: row.about,
            params_schema: row.params_schema.0,
            timeout_ms: row.timeout_ms,
            max_attempts: row.max_attempts,
            result_media_types,
            max_running: row.max_running,
            priority,
            created_at: row.created_at.0,
            updated_at: row.updated_at.0,
            deleted_at: row.deleted_at.map(|at| at.0),
        })
    }
}

/// What a `PUT` of a kind did.
#[derive(Debug, Clone, PartialEq)]
pub enum PutKind {
    /// A new kind, or one deleted and registered again.
    Created(RegisteredKind),
    /// The kind's declaration changed.
    Updated(RegisteredKind),
    /// The same declaration again: nothing written.
    Unchanged(RegisteredKind),
}

impl Store {
    /// Registers `kind` for its tenant, or changes it; the same
    /// declaration again changes nothing (a retried `PUT`).
    pub async fn put_kind(&self, kind: &RegisteredKind, actor: &Actor) -> Result<PutKind> {
        let mut tx = self.begin_write().await?;
        let stored = on_tx!(tx,
            conn => postgres::kinds::get(&mut *conn, &kind.tenant_id, &kind.name).await?,
            conn => sqlite::kinds::get(&mut *conn, &kind.tenant_id, &kind.name).await?,
        );
        let stored = stored.map(RegisteredKind::try_from).transpose()?;
        let now = now_ms();
        let created = stored.as_ref().is_none_or(|s| s.deleted_at.is_some());
        let (row, outcome): (RegisteredKind, fn(RegisteredKind) -> PutKind) = match stored {
            Some(stored) if stored.deleted_at.is_none() && stored.declares_the_same(kind) => {
                tx.rollback().await?;
                return Ok(PutKind::Unchanged(stored));
            }
            Some(stored) if stored.deleted_at.is_none() => (
                RegisteredKind {
                    created_at: stored.created_at,
                    updated_at: now,
                    deleted_at: None,
                    ..kind.clone()
                },
                PutKind::Updated,
            ),
            _ => (
                RegisteredKind {
                    created_at: now,
                    updated_at: now,
                    deleted_at: None,
                    ..kind.clone()
                },
                PutKind::Created,
            ),
        };
        let stored_row = KindRow::of(&row)?;
        on_tx!(tx,
            conn => postgres::kinds::put(conn, &stored_row).await?,
            conn => sqlite::kinds::put(conn, &stored_row).await?,
        );
        let change = AuditChange {
            tenant_id: Some(&kind.tenant_id),
            action: AuditAction::KindRegistered,
            target: Some(&kind.name),
            details: serde_json::json!({ "created": created }),
        };
        self.audit(&mut tx, actor, &change).await?;
        tx.commit().await?;
        Ok(outcome(row))
    }

    /// The tenant's kind of this name, deleted or not.
    pub async fn registered_kind(
        &self,
        tenant_id: &str,
        name: &str,
    ) -> Result<Option<RegisteredKind>> {
        let row = on_pool!(self,
            pool => postgres::kinds::get(pool, tenant_id, name).await?,
            pool => sqlite::kinds::get(pool, tenant_id, name).await?,
        );
        row.map(RegisteredKind::try_from).transpose()
    }

    /// The tenant's kinds, deleted ones included, by name.
    pub async fn registered_kinds(&self, tenant_id: &str) -> Result<Vec<RegisteredKind>> {
        let rows = on_pool!(self,
            pool => postgres::kinds::list(pool, tenant_id).await?,
            pool => sqlite::kinds::list(pool, tenant_id).await?,
        );
        rows.into_iter().map(RegisteredKind::try_from).collect()
    }

    /// Deletes the tenant's kind: `None` if it is not registered, else how
    /// many of its jobs are queued or running (they are still leased).
    pub async fn delete_kind(
        &self,
        tenant_id: &str,
        name: &str,
        actor: &Actor,
    ) -> Result<Option<i64>> {
        let mut tx = self.begin_write().await?;
        let now = Millis(now_ms());
        let deleted = on_tx!(tx,
            conn => postgres::kinds::delete(conn, tenant_id, name, now).await?,
            conn => sqlite::kinds::delete(conn, tenant_id, name, now).await?,
        );
        if !deleted {
            tx.rollback().await?;
            return Ok(None);
        }
        let active = on_tx!(tx,
            conn => postgres::kinds::active_jobs(&mut *conn, tenant_id, name).await?,
            conn => sqlite::kinds::active_jobs(&mut *conn, tenant_id, name).await?,
        );
        let change = AuditChange {
            tenant_id: Some(tenant_id),
            action: AuditAction::KindDeleted,
            target: Some(name),
            details: serde_json::json!({ "active_jobs": active }),
        };
        self.audit(&mut tx, actor, &change).await?;
        tx.commit().await?;
        Ok(Some(active))
    }
}

impl KindRow {
    fn of(kind: &RegisteredKind) -> Result<Self> {
        let media_types = serde_json::to_string(&kind.result_media_types)
            .map_err(|e| Error::Corrupt(format!("media types: {e}")))?;
        Ok(KindRow {
            tenant_id: kind.tenant_id.clone(),
            name: kind.name.clone(),
            about: kind.about.clone(),
            params_schema: crate::sql::JsonText(kind.params_schema.clone()),
            timeout_ms: kind.timeout_ms,
            max_attempts: kind.max_attempts,
            result_media_types: crate::sql::JsonText(media_types),
            max_running: kind.max_running,
            priority: kind.priority.as_str().to_owned(),
            created_at: Millis(kind.created_at),
            updated_at: Millis(kind.updated_at),
            deleted_at: kind.deleted_at.map(Millis),
        })
    }
}
