-- worker_remove.lua — remove a worker and release every instance it holds.
--
-- Idempotent: removing an unknown worker changes nothing (no version bump).
-- The wake epoch is not bumped: a worker leaving can unblock nothing. The
-- follow-up work (reschedule the released bookings, expire their records) is
-- recorded in the same step (see release.lua).
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  workers hash             gpusched:cluster:workers
-- KEYS[3]  worker GPU keys hash     gpusched:cluster:worker_gpus
-- KEYS[4]  capacity hash            gpusched:ledger:capacity
-- KEYS[5]  booked hash              gpusched:ledger:booked
-- KEYS[6]  instances hash           gpusched:cluster:instances
-- KEYS[7]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[8]  claims hash              gpusched:ledger:claims
-- KEYS[9]  changes stream           gpusched:cluster:changes
-- KEYS[10] audit stream             gpusched:events
-- KEYS[11] worker health hash       gpusched:cluster:health
-- KEYS[12] timers sorted set        gpusched:timers
-- KEYS[13] follow-ups sorted set    gpusched:followups
-- KEYS[14] follow-up jobs hash       gpusched:followup_jobs
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  changes stream MAXLEN (approximate)
-- ARGV[6]  reason (free text recorded in the event)
-- ARGV[7]  follow-up due time (ms)
--
-- Returns {"removed", version, released_json, followup_id or ""}
-- (released = [{key, meta}]) or {"absent"}.

if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 0 then return {'absent'} end

local released = {}
local metas = redis.call('HGETALL', KEYS[7])
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
for _, item in ipairs(released) do
  release_instance(KEYS[5], KEYS[6], KEYS[7], KEYS[8], item.key)
end

local gpu_keys = redis.call('HGET', KEYS[3], ARGV[4]) or ''
for gk in string.gmatch(gpu_keys, '[^;]+') do redis.call('HDEL', KEYS[4], gk) end
redis.call('HDEL', KEYS[2], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[4])
redis.call('HDEL', KEYS[11], ARGV[4])
redis.call('ZREM', KEYS[12], 'grace:' .. ARGV[4], 'stable:' .. ARGV[4])

local v = tostring(redis.call('INCR', KEYS[1]))
local data = cjson.encode({worker_id = tonumber(ARGV[4]), released = released, reason = ARGV[6]})
redis.call('XADD', KEYS[9], 'MAXLEN', '~', ARGV[5], '*',
  'version', v, 'type', 'sched.worker.removed', 'data', data)
emit(KEYS[10], 'sched.worker.removed', '', v, data, 0)
local job = ''
if #released > 0 then
  job = follow_up({due = KEYS[13], jobs = KEYS[14]}, ARGV[7], ARGV[6], released, true, {})
end
return {'removed', v, cjson.encode(released), job}
