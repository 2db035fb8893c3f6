//! Every statement on Postgres, by area. Times are `timestamptz`, flags
//! `boolean`, JSON `jsonb`; lists are bound as arrays (`= ANY ($1)`), so
//! each statement has one text whatever the size of its list, and keeps
//! one prepared plan per connection.

pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod dashboard;
pub(crate) mod earlier_apalis;
pub(crate) mod gauges;
pub(crate) mod idempotency;
pub(crate) mod jobs;
pub(crate) mod keys;
pub(crate) mod kinds;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod periods;
pub(crate) mod results;
pub(crate) mod retention;
pub(crate) mod sagas;
pub(crate) mod schedules;
pub(crate) mod secrets;
pub(crate) mod session;
pub(crate) mod submit;
#[cfg(feature = "test-hooks")]
pub(crate) mod test_hooks;
pub(crate) mod webhooks;
pub(crate) mod work;

use sqlx::PgConnection;

/// A NOTIFY of final statuses for other processes' long polls, delivered
/// when the transaction commits.
pub(crate) async fn notify_finished(
    conn: &mut PgConnection,
    job_ids: &[String],
) -> sqlx::Result<()> {
    sqlx::query(sql!("SELECT pg_notify($1, $2)"))
        .bind(crate::FINISHED_CHANNEL)
        .bind(job_ids.join(","))
        .execute(conn)
        .await?;
    Ok(())
}

/// The database's clock now, in unix ms (`Store::sync_clock`): the time
/// of the moment it is read, not of its transaction's start.
pub(crate) async fn database_time_ms(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql!(
        "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    ))
    .fetch_one(db)
    .await
}

/// Moves the versions of applied migrations that were renamed to their
/// present names (see `Store::migrate`); nothing when none was applied.
/// Only the old numbers themselves: migrations written since on those
/// days have numbers of their own.
pub(crate) async fn carry_renamed_migrations(conn: &mut PgConnection) -> sqlx::Result<u64> {
    let applied: bool =
        sqlx::query_scalar(sql!("SELECT to_regclass('receipt_migrations') IS NOT NULL"))
            .fetch_one(&mut *conn)
            .await?;
    if !applied {
        return Ok(0);
    }
    let moved = sqlx::query(sql!(
        "UPDATE receipt_migrations SET version = 20261205000000 + version % 1000000 \
         WHERE version IN (20261206000090, 20261207000100, 20261208000110, 20261208000120, \
                           20261208000130, 20261208000140, 20261209000150, 20261210000160, \
                           20261211000170)"
    ))
    .execute(conn)
    .await?;
    Ok(moved.rows_affected())
}
