//! What apalis's Postgres storage, which earlier versions queued in on
//! Postgres without Redis, left in its table: nothing reads it any more,
//! and the jobs of the messages not yet run are claimable from their rows,
//! so the rows are only deleted. Reached through a pool of one connection,
//! made when first used and closed when idle, until the table is found
//! gone: nothing makes it again.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use sqlx::PgPool;

use crate::{Result, Store, postgres};

/// apalis's table of earlier versions (see the module's doc).
#[derive(Clone)]
pub struct EarlierApalisTable {
    /// `None` on SQLite, where no version queued there.
    pool: Option<PgPool>,
    gone: Arc<AtomicBool>,
}

impl Store {
    /// apalis's table of earlier versions, in this store's database.
    pub fn earlier_apalis_table(&self) -> EarlierApalisTable {
        let pool = match &self.db {
            crate::Db::Postgres(_) => sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .idle_timeout(Duration::from_secs(30))
                .connect_lazy(self.session_url())
                .ok(),
            crate::Db::Sqlite(_) => None,
        };
        EarlierApalisTable {
            gone: Arc::new(AtomicBool::new(pool.is_none())),
            pool,
        }
    }
}

impl EarlierApalisTable {
    /// Deletes up to `limit` rows the queue named `queue` left there,
    /// whatever their status; answers how many.
    pub async fn delete_left(&self, queue: &str, limit: i64) -> Result<u64> {
        let Some(pool) = self
            .pool
            .as_ref()
            .filter(|_| !self.gone.load(Ordering::Relaxed))
        else {
            return Ok(0);
        };
        if !postgres::earlier_apalis::exists(pool).await? {
            self.gone.store(true, Ordering::Relaxed);
            pool.close().await;
            return Ok(0);
        }
        Ok(postgres::earlier_apalis::delete_left(pool, queue, limit).await?)
    }
}
