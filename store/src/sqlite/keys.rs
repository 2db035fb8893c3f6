//! API keys on SQLite.

use sqlx::{SqliteConnection, SqliteExecutor, types::Json};

use crate::rows::keys::KeyStateRow;

pub(crate) use crate::portable::sqlite::keys::*;

/// The key's owner and revocation.
pub(crate) async fn state(
    conn: &mut SqliteConnection,
    key_id: &str,
) -> sqlx::Result<Option<KeyStateRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, revoked_at FROM api_keys WHERE key_id = $1"
    ))
    .bind(key_id)
    .fetch_optional(conn)
    .await
}

/// Each key's latest use, unless a later one is stored. `uses` is bound
/// as one JSON array of `[key_id, used_at]` pairs.
pub(crate) async fn record_uses(
    db: impl SqliteExecutor<'_>,
    uses: &[(String, i64)],
) -> sqlx::Result<()> {
    sqlx::query(sql!(
        "UPDATE api_keys SET last_used_at = u.used_at
         FROM (SELECT json_extract(value, '$[0]') AS key_id,
                      MAX(json_extract(value, '$[1]')) AS used_at
               FROM json_each($1) GROUP BY 1) AS u
         WHERE api_keys.key_id = u.key_id
           AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < u.used_at)"
    ))
    .bind(Json(uses))
    .execute(db)
    .await?;
    Ok(())
}
