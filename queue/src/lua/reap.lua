-- Returns the in-flight messages of consumers whose heartbeat expired (a
-- worker that died, or stalled longer than the heartbeat's time to live),
-- or of the one consumer named, to their tenants' queues at their ranks
-- (they were fetched first, so they are among the first again; a message
-- without a rank goes first). A returned message for a
-- job that was claimed meanwhile is harmless (the claim guard drops it).
-- No wake-up: idle consumers look once a second on their own.
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV[1]: a consumer to release whatever its heartbeat says (one that
-- stops), or "" for every consumer whose heartbeat expired
-- Returns: messages returned
local prefix = KEYS[1]
local ring = prefix .. ":ring"
local returned = 0

local function release(consumer)
    local inflight = prefix .. ":inflight:" .. consumer
    local messages = redis.call("LRANGE", inflight, 0, -1)
    for i = #messages, 1, -1 do
        local ok, decoded = pcall(cjson.decode, messages[i])
        local tenant, rank = "", 0
        if ok and type(decoded) == "table" then
            if type(decoded.tenant_id) == "string" then
                tenant = decoded.tenant_id
            end
            if type(decoded.rank_at) == "number" then
                rank = decoded.rank_at
            end
        end
        local queued = prefix .. ":queued:" .. tenant
        if redis.call("ZADD", queued, "NX", rank, messages[i]) == 1 then
            if redis.call("ZCARD", queued) == 1
                and redis.call("LLEN", prefix .. ":fifo:" .. tenant) == 0 then
                redis.call("LPUSH", ring, tenant)
            end
        elseif ok and type(decoded) == "table" and type(decoded.job_id) == "string" then
            -- The same message waits already: one copy is held, not two.
            if redis.call("HINCRBY", prefix .. ":held", decoded.job_id, -1) <= 0 then
                redis.call("HDEL", prefix .. ":held", decoded.job_id)
            end
        end
        returned = returned + 1
    end
    redis.call("DEL", inflight, prefix .. ":alive:" .. consumer, prefix .. ":fetched:" .. consumer)
    redis.call("SREM", prefix .. ":consumers", consumer)
end

if ARGV[1] ~= "" then
    release(ARGV[1])
else
    for _, consumer in ipairs(redis.call("SMEMBERS", prefix .. ":consumers")) do
        if redis.call("EXISTS", prefix .. ":alive:" .. consumer) == 0 then
            release(consumer)
        end
    end
end
return returned
