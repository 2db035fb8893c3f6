//! Idempotency keys, the statements written once for both databases (see
//! `crate::portable`).


use super::Conn;
use crate::rows::idempotency::KeyRow;

pub(crate) async fn get(
    conn: &mut Conn,
    tenant_id: &str,
    key: &str,
) -> sqlx::Result<Option<KeyRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, idem_key, fingerprint, expires_at, response_status, response_headers,
                response_body
         FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2"
    ))
    .bind(tenant_id)
    .bind(key)
    .fetch_optional(conn)
    .await
}
