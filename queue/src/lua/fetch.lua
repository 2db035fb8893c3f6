-- Acknowledges the messages in ARGV[4..] (removes them from the consumer's
-- in-flight list: their handlers returned), then takes up to ARGV[2] messages, one from each tenant in the ring's order
-- (round robin: a tenant goes to the back of the ring while its FIFO has
-- more), into the consumer's in-flight list, and refreshes the consumer's
-- heartbeat in the same step so no fetched message is ever unwatched.
--
-- KEYS[1]: the queue's prefix ({QUEUE_NAME}:jobs)
-- ARGV[1]: consumer name; ARGV[2]: at most this many (its free slots);
-- ARGV[3]: the heartbeat's time to live, ms; ARGV[4..]: messages to
-- acknowledge
-- Returns: the messages taken
local prefix, consumer, most = KEYS[1], ARGV[1], tonumber(ARGV[2])
local ring = prefix .. ":ring"
local inflight = prefix .. ":inflight:" .. consumer
redis.call("SET", prefix .. ":alive:" .. consumer, 1, "PX", ARGV[3])
redis.call("SADD", prefix .. ":consumers", consumer)
for i = 4, #ARGV do
    redis.call("LREM", inflight, 1, ARGV[i])
end
local taken = {}
while #taken < most do
    local tenant = redis.call("LPOP", ring)
    if not tenant then
        break
    end
    local fifo = prefix .. ":fifo:" .. tenant
    local message = redis.call("LPOP", fifo)
    if message then
        taken[#taken + 1] = message
        redis.call("RPUSH", inflight, message)
    end
    if redis.call("LLEN", fifo) > 0 then
        redis.call("RPUSH", ring, tenant)
    end
end
return taken
