//! A session's statements, written once for both databases (see
//! `crate::portable`).

use sqlx::Executor;

use super::Db;

/// Whether the database answers.
pub(crate) async fn ping(db: impl Executor<'_, Database = Db>) -> sqlx::Result<()> {
    db.execute(sql!("SELECT 1")).await.map(drop)
}
