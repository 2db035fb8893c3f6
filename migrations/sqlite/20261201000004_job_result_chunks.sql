-- Results too big for one document (ledger-export) are written in chunks
-- while the attempt runs, each insert fenced by the attempt like every other
-- write an attempt makes. A chunk's body is a run of JSON values separated by
-- commas (the inside of a JSON array); the api streams a result chunk by
-- chunk, so neither process holds a whole result in memory.
--
-- Only the attempt named by its job's `job_results` row is ever served.
-- Chunks of an attempt that did not succeed are deleted when the next
-- attempt starts writing, or with the job's final status when there is no
-- next attempt; deleting the job deletes its chunks.
CREATE TABLE job_result_chunks (
    job_id  TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt BIGINT NOT NULL,               -- the fencing token of the attempt that wrote it
    seq     BIGINT NOT NULL,               -- 0, 1, 2, ... within the attempt
    body    TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt, seq)
);

-- The success write stays small: for a chunked result it names the attempt
-- whose chunks are the result and how many there are (`body` is then empty);
-- both are NULL when `body` is the whole result.
ALTER TABLE job_results ADD COLUMN chunk_attempt BIGINT;
ALTER TABLE job_results ADD COLUMN chunk_count BIGINT;
