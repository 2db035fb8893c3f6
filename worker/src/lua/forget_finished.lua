-- Forgets what apalis-redis keeps of every finished message. Its ack
-- (handle_results.lua) moves a message's id from the worker's inflight set
-- into the done set (or the dead set once apalis gives up on it) and leaves
-- its payload in the data hash and a metadata hash `{queue}:meta:{id}`
-- behind, forever: two entries and one key per job ever run.
--
-- An id is taken out of its set (SPOP, so processes running this at once
-- take different ids) and its payload and metadata are deleted only if the
-- metadata still says the message is finished. A message that was pushed
-- back to the queue meanwhile says Pending or Running: it loses only its
-- place in the set, which its next ack gives back.
--
-- KEYS[1]: the done set ({queue}:done)
-- KEYS[2]: the dead set ({queue}:dead)
-- KEYS[3]: the payload hash ({queue}:data)
-- KEYS[4]: the metadata prefix ({queue}:meta)
-- ARGV[1]: at most this many ids taken from each set
-- Returns: {ids taken, messages forgotten}
local limit = tonumber(ARGV[1])
local taken, forgotten = 0, 0

local function forget(set, finished)
    local ids = redis.call("SPOP", set, limit)
    for _, id in ipairs(ids) do
        taken = taken + 1
        local meta_key = KEYS[4] .. ":" .. id
        local status = redis.call("HGET", meta_key, "status")
        if status and finished[status] then
            redis.call("HDEL", KEYS[3], id)
            redis.call("DEL", meta_key)
            forgotten = forgotten + 1
        end
    end
end

forget(KEYS[1], { Done = true })
forget(KEYS[2], { Done = true, Failed = true, Killed = true })

return { taken, forgotten }
