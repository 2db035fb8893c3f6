//! Results written in chunks, for kinds whose result may not fit in memory
//! (`ledger-export`): the handler writes its rows a chunk at a time while
//! it runs, and the api renders them a chunk at a time while it sends.
//!
//! A chunk is a run of JSON values separated by commas, the inside of a
//! JSON array: each row is serialised once, by the worker, and the JSON
//! answer is the chunks with the document's opening and closing around them.

use serde::Serialize;

use super::{JobContext, JobFailure, ReportOutput};

/// A chunk is written once its rows reach this many bytes: small enough
/// that neither process holds much of a result at once, big enough that a
/// million rows take a few hundred writes.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// The formats a result is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFormat {
    Json,
    Csv,
}

/// Serves a result written in chunks, piece by piece, in one format. The
/// answer is `head`, then each chunk in order, then `tail`.
/// An error means the stored result cannot be rendered (a corrupt chunk).
pub trait ChunkRenderer: Send {
    fn head(&mut self) -> store::Result<String>;

    /// One stored chunk, in the answer's format.
    fn chunk(&mut self, body: &str) -> store::Result<String>;

    fn tail(&mut self) -> store::Result<String>;
}

/// Collects an attempt's result rows and writes them in chunks of about
/// [`CHUNK_BYTES`], each write fenced by the attempt.
pub struct ChunkWriter<'a> {
    ctx: &'a JobContext,
    buffer: Vec<u8>,
    written: i64,
}

impl<'a> ChunkWriter<'a> {
    /// Deletes what earlier attempts of the job wrote (none of it can be
    /// the result now), then starts this attempt's chunks.
    pub async fn start(ctx: &'a JobContext) -> Result<Self, JobFailure> {
        ctx.store
            .discard_chunks_before(&ctx.job_id, ctx.attempt)
            .await?;
        Ok(Self {
            ctx,
            buffer: Vec::with_capacity(CHUNK_BYTES + CHUNK_BYTES / 8),
            written: 0,
        })
    }

    /// Adds one row; writes a chunk when the rows so far fill one.
    pub async fn push(&mut self, row: &impl Serialize) -> Result<(), JobFailure> {
        if !self.buffer.is_empty() {
            self.buffer.push(b',');
        }
        serde_json::to_writer(&mut self.buffer, row)
            .map_err(|e| JobFailure::permanent("serialization", e.to_string()))?;
        if self.buffer.len() >= CHUNK_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes what is left; the result is the chunks written.
    pub async fn finish(mut self) -> Result<ReportOutput, JobFailure> {
        if !self.buffer.is_empty() {
            self.flush().await?;
        }
        Ok(ReportOutput::Chunks(self.written))
    }

    async fn flush(&mut self) -> Result<(), JobFailure> {
        let body = std::str::from_utf8(&self.buffer)
            .map_err(|e| JobFailure::permanent("serialization", e.to_string()))?;
        self.ctx.write_chunk(self.written, body).await?;
        self.written += 1;
        self.buffer.clear();
        Ok(())
    }
}
