-- decider_presence.lua — take, renew or hand back the partition's decider presence (decider_standby).
--
-- With decider_standby on, the worker node holding this key consumes the decision
-- queues and the others stand by (tasks.runtime.standby). One atomic step, so that a
-- renewal never extends a presence another node took after ours expired, and a hand-back
-- never deletes another node's.
--
-- KEYS[1]  decider presence         gpusched:lock:decider
--
-- ARGV[1]  this node's id
-- ARGV[2]  the presence's TTL (ms); 0 hands it back
--
-- Returns 1 when the presence is this node's after the call (taken or renewed), else 0
-- (another node's, or handed back).

local presence_key = KEYS[1]

local me = ARGV[1]
local ttl_ms = tonumber(ARGV[2])

local holder = redis.call('GET', presence_key)
if ttl_ms == 0 then
  if holder == me then redis.call('DEL', presence_key) end
  return 0
end
if not holder then
  redis.call('SET', presence_key, me, 'PX', ttl_ms)
  return 1
end
if holder == me then
  redis.call('PEXPIRE', presence_key, ttl_ms)
  return 1
end
return 0
