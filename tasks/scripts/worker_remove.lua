-- worker_remove.lua — remove a worker and release every instance it holds.
--
-- Idempotent: removing an unknown worker changes nothing (no version bump).
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  workers hash             gpusched:cluster:workers
-- KEYS[4]  worker GPU keys hash     gpusched:cluster:worker_gpus
-- KEYS[5]  capacity hash            gpusched:ledger:capacity
-- KEYS[6]  booked hash              gpusched:ledger:booked
-- KEYS[7]  instances hash           gpusched:cluster:instances
-- KEYS[8]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[9]  claims hash              gpusched:ledger:claims
-- KEYS[10] changes stream           gpusched:cluster:changes
-- KEYS[11] audit stream             gpusched:events
-- KEYS[12] worker health hash       gpusched:cluster:health
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  changes stream MAXLEN (approximate)
-- ARGV[6]  reason (free text recorded in the event)
--
-- Returns {"removed", version, released_json} (released = [{key, meta}]) or {"absent"}.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local function release_one(key)
  local claims = redis.call('HGET', KEYS[9], key) or ''
  for gk, amount in string.gmatch(claims, '([^;=]+)=(%d+)') do
    if amount ~= '0' then
      if redis.call('HINCRBY', KEYS[6], gk, '-' .. amount) <= 0 then
        redis.call('HDEL', KEYS[6], gk)
      end
    end
  end
  redis.call('HDEL', KEYS[7], key)
  redis.call('HDEL', KEYS[8], key)
  redis.call('HDEL', KEYS[9], key)
end

if redis.call('HEXISTS', KEYS[3], ARGV[4]) == 0 then return {'absent'} end

local released = {}
local metas = redis.call('HGETALL', KEYS[8])
for i = 1, #metas, 2 do
  local meta = cjson.decode(metas[i + 1])
  for _, w in ipairs(meta['w']) do
    if tostring(w) == ARGV[4] then
      released[#released + 1] = {key = metas[i], meta = meta}
      break
    end
  end
end
table.sort(released, function(a, b)
  return a.meta['v'] < b.meta['v'] or (a.meta['v'] == b.meta['v'] and a.meta['i'] < b.meta['i'])
end)
for _, item in ipairs(released) do release_one(item.key) end

local gpu_keys = redis.call('HGET', KEYS[4], ARGV[4]) or ''
for gk in string.gmatch(gpu_keys, '[^;]+') do redis.call('HDEL', KEYS[5], gk) end
redis.call('HDEL', KEYS[3], ARGV[4])
redis.call('HDEL', KEYS[4], ARGV[4])
redis.call('HDEL', KEYS[12], ARGV[4])

local v = tostring(redis.call('INCR', KEYS[1]))
redis.call('INCR', KEYS[2])
local data = cjson.encode({worker_id = tonumber(ARGV[4]), released = released, reason = ARGV[6]})
redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[5], '*',
  'version', v, 'type', 'sched.worker.removed', 'data', data)
emit(KEYS[11], 'sched.worker.removed', '', v, data, 0)
return {'removed', v, cjson.encode(released)}
