-- Pushes messages onto their tenants' FIFOs; a tenant whose FIFO was empty
-- joins the back of the ring. Then wakes as many idle consumers as there
-- are messages (up to a few: a consumer fetches all its free slots' worth).
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV: tenant, message, tenant, message, ...
-- Returns: messages pushed
local prefix = KEYS[1]
local count = 0
for i = 1, #ARGV, 2 do
    local tenant, message = ARGV[i], ARGV[i + 1]
    if redis.call("RPUSH", prefix .. ":fifo:" .. tenant, message) == 1 then
        redis.call("RPUSH", prefix .. ":ring", tenant)
    end
    count = count + 1
end
-- Wake-up tokens: each BLPOP of an idle consumer takes one. Trimmed, so
-- pushes while every consumer is busy leave a few stale ones, not many.
for _ = 1, math.min(count, 8) do
    redis.call("LPUSH", prefix .. ":wake", 1)
end
redis.call("LTRIM", prefix .. ":wake", 0, 7)
return count
