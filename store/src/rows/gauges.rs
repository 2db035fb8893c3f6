//! The queue's gauges: the rows its statements read and write.

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KindCountRow {
    pub(crate) kind: String,
    pub(crate) queued: i64,
    pub(crate) running: i64,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TenantCountRow {
    pub(crate) tenant_id: String,
    pub(crate) queued: i64,
    pub(crate) running: i64,
}
