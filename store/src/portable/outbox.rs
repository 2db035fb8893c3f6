//! The outbox, the statements written once for both databases (see
//! `crate::portable`).

use super::Conn;

pub(crate) async fn delete(conn: &mut Conn, job_id: &str) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM outbox WHERE job_id = $1"))
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Marks the job rows as the queue (see `queue_in_job_rows` in the
/// migrations): statements that make a job due write no outbox row from
/// now on, and the rows left from a queue that used them are read by no
/// one: deleted.
pub(crate) async fn mark_queue_in_job_rows(conn: &mut Conn) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "INSERT INTO queue_in_job_rows (only_row) VALUES (true) ON CONFLICT DO NOTHING"
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!("DELETE FROM outbox")).execute(conn).await?;
    Ok(())
}

/// Marks Redis as the queue: statements that make a job due write its
/// outbox row again, which the relay publishes.
pub(crate) async fn mark_queue_in_redis(conn: &mut Conn) -> sqlx::Result<()> {
    sqlx::query(sql!("DELETE FROM queue_in_job_rows"))
        .execute(conn)
        .await?;
    Ok(())
}
