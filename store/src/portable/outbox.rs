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
