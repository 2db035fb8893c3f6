-- Returns the in-flight messages of consumers whose heartbeat expired (a
-- worker that died, or stalled longer than the heartbeat's time to live),
-- or of the one consumer named, to the front of their tenants' FIFOs, so
-- they are fetched next: they were fetched first. A returned message for a
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
        local tenant = ""
        if ok and type(decoded) == "table" and type(decoded.tenant_id) == "string" then
            tenant = decoded.tenant_id
        end
        if redis.call("LPUSH", prefix .. ":fifo:" .. tenant, messages[i]) == 1 then
            redis.call("LPUSH", ring, tenant)
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
