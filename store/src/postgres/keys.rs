//! API keys on Postgres.

use sqlx::{PgConnection, PgExecutor};

use crate::{rows::keys::KeyStateRow, sql::Millis};

pub(crate) use crate::portable::postgres::keys::*;

/// The generation's row, locked until the transaction ends: the turn of a
/// change to the set of keys.
pub(crate) async fn lock_generation(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query(sql!("SELECT generation FROM api_key_generation FOR UPDATE"))
        .execute(conn)
        .await?;
    Ok(())
}

/// The key's owner and revocation, locked until the transaction ends.
pub(crate) async fn lock_state(
    conn: &mut PgConnection,
    key_id: &str,
) -> sqlx::Result<Option<KeyStateRow>> {
    sqlx::query_as(sql!(
        "SELECT tenant_id, revoked_at FROM api_keys WHERE key_id = $1 FOR UPDATE"
    ))
    .bind(key_id)
    .fetch_optional(conn)
    .await
}

/// Each key's latest use, unless a later one is stored.
pub(crate) async fn record_uses(
    db: impl PgExecutor<'_>,
    uses: &[(String, i64)],
) -> sqlx::Result<()> {
    let (key_ids, used_at): (Vec<&str>, Vec<Millis>) = uses
        .iter()
        .map(|(key_id, at)| (key_id.as_str(), Millis(*at)))
        .unzip();
    sqlx::query(sql!(
        "UPDATE api_keys AS k SET last_used_at = u.used_at
         FROM (SELECT key_id, MAX(used_at) AS used_at
               FROM UNNEST($1::text[], $2::timestamptz[]) AS u (key_id, used_at)
               GROUP BY key_id) AS u
         WHERE k.key_id = u.key_id AND (k.last_used_at IS NULL OR k.last_used_at < u.used_at)"
    ))
    .bind(key_ids)
    .bind(used_at)
    .execute(db)
    .await?;
    Ok(())
}
