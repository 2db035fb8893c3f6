//! The operator's gauges on SQLite (`crate::gauges`).

use sqlx::SqliteExecutor;

use crate::sql::Millis;

pub(crate) use crate::portable::sqlite::gauges::*;

/// Outbox rows due by `now` and not yet published, counted up to `limit`.
pub(crate) async fn outbox_backlog(
    db: impl SqliteExecutor<'_>,
    now: Millis,
    limit: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT COUNT(*) FROM (
             SELECT 1 AS one FROM outbox WHERE republish_ms = 0 AND publish_at <= $1 LIMIT $2
         ) AS o"
    ))
    .bind(now)
    .bind(limit)
    .fetch_one(db)
    .await
}

/// When the longest-due unpublished outbox row became due.
pub(crate) async fn outbox_oldest(
    db: impl SqliteExecutor<'_>,
    now: Millis,
) -> sqlx::Result<Option<Millis>> {
    sqlx::query_scalar(sql!(
        "SELECT MIN(publish_at) FROM outbox WHERE republish_ms = 0 AND publish_at <= $1"
    ))
    .bind(now)
    .fetch_one(db)
    .await
}
