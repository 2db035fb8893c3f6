-- The database queue's fetch, as a function so that its plans are made
-- with sequential scans priced out. Prepared as a statement, the fetch
-- kept a plan Postgres made while `queue_messages` held a few rows: a
-- sequential scan for the acknowledgements, the walk back to the first
-- tenants and the taking of the chosen messages, so that behind a backlog
-- every fetch read the whole queue. Planning it afresh on every call costs
-- more than the fetch itself. Every access here has an index made for it;
-- the settings hold only while the function runs. JIT is off with them:
-- were a plan ever left with a scan it cannot avoid, the price put on it
-- would pass the threshold for compiling the plan, on every fetch.
-- Its transaction (the statement that calls it) commits without waiting
-- for its WAL to reach disk: nothing a fetch writes must outlive a crash
-- (docs/design.md, The database queue), and every later claim or outcome,
-- which waits, puts it on disk before it answers.
CREATE FUNCTION queue_fetch(
    fetch_queue TEXT, fetch_consumer TEXT, most BIGINT, after_tenant TEXT, acks BIGINT[],
    alive_ms BIGINT
)
RETURNS TABLE (
    message_id BIGINT, job_id TEXT, tenant_id TEXT, rank_at timestamptz, turn BIGINT, n BIGINT
) LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH RECURSIVE alive AS (
            INSERT INTO queue_consumers (queue, consumer, alive_until)
            VALUES (fetch_queue, fetch_consumer, now() + alive_ms::float8 * interval '1 millisecond')
            ON CONFLICT (queue, consumer) DO UPDATE SET alive_until = EXCLUDED.alive_until
        ), acked AS (
            DELETE FROM queue_messages WHERE message_id = ANY(acks) AND consumer = fetch_consumer
        ), after_cursor (tenant_id, turn) AS (
            SELECT min(tenant_id), 1::bigint FROM queue_messages
            WHERE queue = fetch_queue AND consumer IS NULL AND tenant_id > after_tenant
          UNION ALL
            SELECT (SELECT min(m.tenant_id) FROM queue_messages m
                    WHERE m.queue = fetch_queue AND m.consumer IS NULL AND m.tenant_id > t.tenant_id),
                   t.turn + 1
            FROM after_cursor t WHERE t.tenant_id IS NOT NULL AND t.turn < most
        ), from_start (tenant_id, turn) AS (
            SELECT min(tenant_id), 1::bigint FROM queue_messages
            WHERE queue = fetch_queue AND consumer IS NULL AND tenant_id <= after_tenant
          UNION ALL
            SELECT (SELECT min(m.tenant_id) FROM queue_messages m
                    WHERE m.queue = fetch_queue AND m.consumer IS NULL
                      AND m.tenant_id > t.tenant_id AND m.tenant_id <= after_tenant),
                   t.turn + 1
            FROM from_start t WHERE t.tenant_id IS NOT NULL AND t.turn < most
        ), tenants AS (
            SELECT tenant_id, turn FROM (
                SELECT tenant_id, turn FROM after_cursor WHERE tenant_id IS NOT NULL
                UNION ALL
                SELECT tenant_id, turn + most FROM from_start WHERE tenant_id IS NOT NULL
            ) AS both_sides ORDER BY turn LIMIT most
        ), per_tenant AS (
            SELECT GREATEST(1, ceil(most::float8 / GREATEST(1, count(*))))::bigint AS share
            FROM tenants
        ), candidates AS (
            SELECT c.message_id, t.turn,
                   row_number() OVER (PARTITION BY t.turn ORDER BY c.rank_at, c.message_id) AS n
            FROM tenants t CROSS JOIN per_tenant p CROSS JOIN LATERAL (
                SELECT m.message_id, m.rank_at FROM queue_messages m
                WHERE m.queue = fetch_queue AND m.consumer IS NULL AND m.tenant_id = t.tenant_id
                ORDER BY m.rank_at, m.message_id LIMIT p.share
                FOR UPDATE SKIP LOCKED
            ) AS c
        ), chosen AS (
            SELECT message_id, turn, n FROM candidates ORDER BY n, turn LIMIT most
        ), taken AS (
            UPDATE queue_messages q SET consumer = fetch_consumer, fetched_at = now()
            WHERE q.message_id = ANY (ARRAY(SELECT message_id FROM chosen))
            RETURNING q.message_id, q.job_id, q.tenant_id, q.rank_at
        )
        SELECT t.message_id, t.job_id, t.tenant_id, t.rank_at, c.turn, c.n
        FROM taken t JOIN chosen c ON c.message_id = t.message_id;
END
$$;
