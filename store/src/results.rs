//! Job results: one row per job in `job_results`, and for big results the
//! chunks an attempt wrote while it ran (`job_result_chunks`).
//!
//! A chunk insert is fenced by its attempt like every write an attempt
//! makes, and on Postgres it holds a share lock on the job's row until it
//! commits, so it cannot interleave with a change of attempt or status: once
//! an attempt is superseded or ended, no chunk of it appears any more. The
//! chunks of an attempt that did not succeed are therefore deleted for good
//! by the next attempt when it starts writing ([`Store::discard_chunks_before`])
//! or, when none follows, in the transaction of the job's final status.

use crate::{Result, Store, WriteTx, on_pool, on_tx, postgres, sqlite};

pub use crate::rows::results::BytesChunk;
pub(crate) use crate::rows::results::ResultRow;

/// Chunks deleted per transaction when an attempt clears its predecessors'
/// (about 256 KiB each): short transactions, so SQLite's one writer lock is
/// not held for the whole cleanup.
const DISCARD_BATCH: i64 = 16;

/// A `SUCCEEDED` job's result as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredResult {
    /// The whole result, one JSON document.
    Document(String),
    /// Chunks `0..count` written by `attempt` are the result, in order.
    Chunks { attempt: i64, count: i64 },
}

impl From<ResultRow> for StoredResult {
    fn from(row: ResultRow) -> Self {
        match (row.chunk_attempt, row.chunk_count) {
            (Some(attempt), Some(count)) => StoredResult::Chunks { attempt, count },
            _ => StoredResult::Document(row.body.map(String::from).unwrap_or_default()),
        }
    }
}

impl Store {
    /// The stored result of the tenant's job, if it has one.
    pub async fn stored_result(
        &self,
        tenant_id: &str,
        job_id: &str,
    ) -> Result<Option<StoredResult>> {
        let row = on_pool!(self,
            pool => postgres::results::get(pool, tenant_id, job_id).await?,
            pool => sqlite::results::get(pool, tenant_id, job_id).await?,
        );
        Ok(row.map(StoredResult::from))
    }

    /// Chunk `seq` of an attempt's result.
    pub async fn result_chunk(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
    ) -> Result<Option<String>> {
        Ok(on_pool!(self,
            pool => postgres::results::chunk(pool, job_id, attempt, seq).await?,
            pool => sqlite::results::chunk(pool, job_id, attempt, seq).await?,
        ))
    }

    /// Writes chunk `seq` of the attempt's result, only while the attempt
    /// is the current one and still running. Returns whether it was
    /// written: `false` means the attempt was superseded or ended, and must
    /// stop.
    pub async fn write_result_chunk(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
        body: &str,
    ) -> Result<bool> {
        let _turn = self.write_turn().await;
        Ok(on_pool!(self,
            pool => postgres::results::write_chunk(pool, job_id, attempt, seq, body).await?,
            pool => sqlite::results::write_chunk(pool, job_id, attempt, seq, body).await?,
        ))
    }

    /// Writes chunk `seq` of a result streamed by a worker over HTTP:
    /// bytes of `media_type`, fenced as [`Store::write_result_chunk`]; a
    /// chunk this attempt wrote before is replaced.
    pub async fn write_result_bytes(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
        data: &[u8],
        media_type: &str,
    ) -> Result<bool> {
        let _turn = self.write_turn().await;
        Ok(on_pool!(self,
            pool => postgres::results::write_bytes_chunk(pool, job_id, attempt, seq, data, media_type).await?,
            pool => sqlite::results::write_bytes_chunk(pool, job_id, attempt, seq, data, media_type).await?,
        ))
    }

    /// Chunk `seq` of an attempt's result as bytes and their media type;
    /// both `None` for a chunk of JSON values.
    pub async fn result_bytes_chunk(
        &self,
        job_id: &str,
        attempt: i64,
        seq: i64,
    ) -> Result<Option<BytesChunk>> {
        Ok(on_pool!(self,
            pool => postgres::results::bytes_chunk(pool, job_id, attempt, seq).await?,
            pool => sqlite::results::bytes_chunk(pool, job_id, attempt, seq).await?,
        ))
    }

    /// Deletes the chunks that attempts before `attempt` left (they were
    /// superseded or retried: none of them can be the result any more), a
    /// few per transaction. Returns how many it deleted.
    pub async fn discard_chunks_before(&self, job_id: &str, attempt: i64) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let _turn = self.write_turn().await;
            let now = on_pool!(self,
                pool => postgres::results::discard_before(pool, job_id, attempt, DISCARD_BATCH).await?,
                pool => sqlite::results::discard_before(pool, job_id, attempt, DISCARD_BATCH).await?,
            );
            if now == 0 {
                return Ok(deleted);
            }
            deleted += now;
        }
    }
}

/// Deletes every chunk of the job, in the caller's transaction: for a job
/// that reaches a final status without a result.
pub(crate) async fn discard_all_chunks(tx: &mut WriteTx, job_id: &str) -> Result<()> {
    on_tx!(tx,
        conn => postgres::results::discard_all(conn, job_id).await?,
        conn => sqlite::results::discard_all(conn, job_id).await?,
    );
    Ok(())
}
