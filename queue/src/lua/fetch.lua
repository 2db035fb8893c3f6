-- Acknowledges the messages in ARGV[5..] (removes them from the consumer's
-- in-flight list: their handlers returned, and uncounts their jobs in
-- `:held`), then takes up to ARGV[2] messages, one from each tenant in the
-- ring's order (round robin: a tenant goes to the back of the ring while
-- it has more), each the first by rank of its tenant's queue (or, for
-- messages pushed before queues were ranked, of its list `:fifo:{tenant}`),
-- into the consumer's in-flight list, and refreshes the
-- consumer's heartbeat in the same step so no fetched message is ever
-- unwatched.
--
-- A fetch is idempotent by its number (ARGV[4]): what it took is kept in
-- `:fetched:{consumer}` under that number, and a consumer whose answer was
-- lost (Redis persisted the move, then died or the connection broke before
-- answering) asks again with the same number and gets the same messages,
-- instead of leaving them in its in-flight list, where no one would run
-- them while it lives.
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV[1]: consumer name; ARGV[2]: at most this many (its free slots);
-- ARGV[3]: the heartbeat's time to live, ms; ARGV[4]: the fetch's number;
-- ARGV[5..]: messages to acknowledge
-- Returns: the messages taken
local prefix, consumer, most, number = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[4]
local ring = prefix .. ":ring"
local held = prefix .. ":held"
local inflight = prefix .. ":inflight:" .. consumer
local fetched = prefix .. ":fetched:" .. consumer
redis.call("SET", prefix .. ":alive:" .. consumer, 1, "PX", ARGV[3])
redis.call("SADD", prefix .. ":consumers", consumer)
for i = 5, #ARGV do
    -- Counted once: an acknowledgement sent again (its answer was lost)
    -- removes nothing the second time.
    if redis.call("LREM", inflight, 1, ARGV[i]) == 1 then
        local ok, decoded = pcall(cjson.decode, ARGV[i])
        if ok and type(decoded) == "table" and type(decoded.job_id) == "string" then
            if redis.call("HINCRBY", held, decoded.job_id, -1) <= 0 then
                redis.call("HDEL", held, decoded.job_id)
            end
        end
    end
end
if redis.call("LINDEX", fetched, 0) == number then
    return redis.call("LRANGE", fetched, 1, -1)
end
local taken = {}
while #taken < most do
    local tenant = redis.call("LPOP", ring)
    if not tenant then
        break
    end
    local queued = prefix .. ":queued:" .. tenant
    local fifo = prefix .. ":fifo:" .. tenant
    local message = redis.call("LPOP", fifo)
    if not message then
        local first = redis.call("ZPOPMIN", queued)
        message = first[1]
    end
    if message then
        taken[#taken + 1] = message
        redis.call("RPUSH", inflight, message)
    end
    if redis.call("ZCARD", queued) > 0 or redis.call("LLEN", fifo) > 0 then
        redis.call("RPUSH", ring, tenant)
    end
end
redis.call("DEL", fetched)
redis.call("RPUSH", fetched, number, unpack(taken))
return taken
