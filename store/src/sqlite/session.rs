//! The writing connection's session on SQLite: its settings, and the
//! transactions it runs (`Store::begin_write`), which sqlx's own do not
//! take the write lock at the start of.

use sqlx::{Executor, SqliteConnection, SqlitePool};

pub(crate) use crate::portable::sqlite::session::*;

/// Every SQLite connection's settings. WAL lets readers run beside the one
/// writer; NORMAL is durable across a process crash.
pub(crate) async fn configure(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    for pragma in [
        sql!("PRAGMA journal_mode = WAL"),
        sql!("PRAGMA synchronous = NORMAL"),
        sql!("PRAGMA busy_timeout = 10000"),
        sql!("PRAGMA foreign_keys = ON"),
        // Checkpoints run in the background (`checkpoint`), not inside
        // whichever commit fills the WAL.
        sql!("PRAGMA wal_autocheckpoint = 0"),
    ] {
        conn.execute(pragma).await?;
    }
    Ok(())
}

/// A transaction that takes the write lock at once, so two writers queue
/// instead of one failing when it upgrades a read lock.
pub(crate) async fn begin_immediate(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    conn.execute(sql!("BEGIN IMMEDIATE")).await.map(drop)
}

/// Commits; a COMMIT that fails may leave the transaction open, so it is
/// rolled back before the next writer's BEGIN.
pub(crate) async fn commit(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    let committed = conn.execute(sql!("COMMIT")).await.map(drop);
    if committed.is_err() {
        let _ = rollback(conn).await;
    }
    committed
}

pub(crate) async fn rollback(conn: &mut SqliteConnection) -> sqlx::Result<()> {
    conn.execute(sql!("ROLLBACK")).await.map(drop)
}

/// Copies the WAL back into the database without waiting for readers or
/// writers.
pub(crate) async fn checkpoint(pool: &SqlitePool) -> sqlx::Result<()> {
    pool.execute(sql!("PRAGMA wal_checkpoint(PASSIVE)"))
        .await
        .map(drop)
}
