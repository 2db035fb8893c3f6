-- Pushes messages into their tenants' queues, each a sorted set scored by
-- the job's rank (its due time plus what its priority is worth, in unix
-- ms; equal ranks in message order, which begins with the time-ordered job
-- id); a tenant whose queue was empty joins the back of the ring. A job is
-- counted in `:held` (how many of its messages the queue holds, waiting or
-- in flight) once per message added: a message already waiting is not
-- added twice. Then wakes as many idle consumers as there are messages (up
-- to a few: a consumer fetches all its free slots' worth).
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV: tenant, job id, rank, message, tenant, job id, rank, message, ...
-- Returns: messages added
local prefix = KEYS[1]
local held = prefix .. ":held"
local count = 0
for i = 1, #ARGV, 4 do
    local tenant, job_id, rank, message = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local queued = prefix .. ":queued:" .. tenant
    if redis.call("ZADD", queued, "NX", rank, message) == 1 then
        if redis.call("ZCARD", queued) == 1
            and redis.call("LLEN", prefix .. ":fifo:" .. tenant) == 0 then
            redis.call("RPUSH", prefix .. ":ring", tenant)
        end
        redis.call("HINCRBY", held, job_id, 1)
        count = count + 1
    end
end
-- Wake-up tokens: each BLPOP of an idle consumer takes one. Trimmed, so
-- pushes while every consumer is busy leave a few stale ones, not many.
for _ = 1, math.min(count, 8) do
    redis.call("LPUSH", prefix .. ":wake", 1)
end
redis.call("LTRIM", prefix .. ":wake", 0, 7)
return count
