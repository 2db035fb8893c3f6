-- Pushes messages onto their tenants' FIFOs; a tenant whose FIFO was empty
-- joins the back of the ring. Each message's job is counted in `:held`
-- (how many of its messages the queue holds, waiting or in flight), so the
-- relay can ask which published jobs the queue really has. Then wakes as
-- many idle consumers as there are messages (up to a few: a consumer
-- fetches all its free slots' worth).
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV: tenant, job id, message, tenant, job id, message, ...
-- Returns: messages pushed
local prefix = KEYS[1]
local held = prefix .. ":held"
local count = 0
for i = 1, #ARGV, 3 do
    local tenant, job_id, message = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if redis.call("RPUSH", prefix .. ":fifo:" .. tenant, message) == 1 then
        redis.call("RPUSH", prefix .. ":ring", tenant)
    end
    redis.call("HINCRBY", held, job_id, 1)
    count = count + 1
end
-- Wake-up tokens: each BLPOP of an idle consumer takes one. Trimmed, so
-- pushes while every consumer is busy leave a few stale ones, not many.
for _ = 1, math.min(count, 8) do
    redis.call("LPUSH", prefix .. ":wake", 1)
end
redis.call("LTRIM", prefix .. ":wake", 0, 7)
return count
