-- release.lua — release instances and their claims (instance deleted, lost,
-- or rescheduled). Idempotent: unknown keys are ignored, and a call that
-- releases nothing changes nothing (no version bump, no event).
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  booked hash              gpusched:ledger:booked
-- KEYS[4]  instances hash           gpusched:cluster:instances
-- KEYS[5]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[6]  claims hash              gpusched:ledger:claims
-- KEYS[7]  changes stream           gpusched:cluster:changes
-- KEYS[8]  audit stream             gpusched:events
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  changes stream MAXLEN (approximate)
-- ARGV[5]  reason (instance_deleted | worker_lost | ...)
-- ARGV[6..] instance keys
--
-- Returns {"released", version, released_json} (released = [{key, meta}]) or {"absent"}.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local released = {}
for i = 6, #ARGV do
  local key = ARGV[i]
  local meta = redis.call('HGET', KEYS[5], key)
  if meta then
    local claims = redis.call('HGET', KEYS[6], key) or ''
    for gk, amount in string.gmatch(claims, '([^;=]+)=(%d+)') do
      if amount ~= '0' then
        if redis.call('HINCRBY', KEYS[3], gk, '-' .. amount) <= 0 then
          redis.call('HDEL', KEYS[3], gk)
        end
      end
    end
    redis.call('HDEL', KEYS[4], key)
    redis.call('HDEL', KEYS[5], key)
    redis.call('HDEL', KEYS[6], key)
    released[#released + 1] = {key = key, meta = cjson.decode(meta)}
  end
end
if #released == 0 then return {'absent'} end

local v = tostring(redis.call('INCR', KEYS[1]))
redis.call('INCR', KEYS[2])
local data = cjson.encode({released = released, reason = ARGV[5]})
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*',
  'version', v, 'type', 'sched.instance.released', 'data', data)
emit(KEYS[8], 'sched.instance.released', '', v, data, 0)
return {'released', v, cjson.encode(released)}
