-- worker_remove.lua — remove a worker and release every instance it holds.
--
-- Idempotent: removing an unknown worker changes nothing (no version bump).
-- The wake epoch is not bumped: a worker leaving can unblock nothing. The
-- follow-up work (reschedule the released bookings, expire their records) is
-- recorded in the same step (see release.lua).
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  workers hash             gpusched:cluster:workers
-- KEYS[3]  worker GPU keys hash     gpusched:cluster:worker_gpus (JSON arrays)
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
-- KEYS[15] vanished workers hash     gpusched:cluster:vanished
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  changes stream MAXLEN (approximate)
-- ARGV[6]  reason (free text recorded in the event)
-- ARGV[7]  follow-up due time (ms)
-- ARGV[8]  now (ms): the worker is recorded as vanished (the mass-outage guard counts it)
--
-- Returns {"removed", version, released_json, followup_id or ""}
-- (released = [{key, meta}]) or {"absent"}.

local version_key = KEYS[1]
local workers_key = KEYS[2]
local worker_gpus_key = KEYS[3]
local capacity_key = KEYS[4]
local booked_key = KEYS[5]
local instances_key = KEYS[6]
local instance_meta_key = KEYS[7]
local claims_key = KEYS[8]
local changes_key = KEYS[9]
local events_key = KEYS[10]
local health_key = KEYS[11]
local timers_key = KEYS[12]
local followups_key = KEYS[13]
local followup_jobs_key = KEYS[14]
local vanished_key = KEYS[15]

local worker_id = ARGV[4]
local changes_maxlen = ARGV[5]
local reason = ARGV[6]
local followup_due_ms = ARGV[7]
local now_ms = ARGV[8]

if redis.call('HEXISTS', workers_key, worker_id) == 0 then return {'absent'} end

local released = {}
local metas = redis.call('HGETALL', instance_meta_key)
for i = 1, #metas, 2 do
  local meta = cjson.decode(metas[i + 1])
  for _, w in ipairs(meta['w']) do
    if tostring(w) == worker_id then
      released[#released + 1] = {key = metas[i], meta = meta}
      break
    end
  end
end
table.sort(released, function(a, b)
  return a.meta['v'] < b.meta['v'] or (a.meta['v'] == b.meta['v'] and a.meta['i'] < b.meta['i'])
end)
for _, item in ipairs(released) do
  release_instance(booked_key, instances_key, instance_meta_key, claims_key, item.key)
end

for _, gk in ipairs(decode_list(redis.call('HGET', worker_gpus_key, worker_id))) do
  redis.call('HDEL', capacity_key, gk)
end
redis.call('HDEL', workers_key, worker_id)
redis.call('HDEL', worker_gpus_key, worker_id)
redis.call('HDEL', health_key, worker_id)
redis.call('HSET', vanished_key, worker_id, now_ms)
redis.call('ZREM', timers_key, 'grace:' .. worker_id, 'stable:' .. worker_id)

local v = tostring(redis.call('INCR', version_key))
local data = cjson.encode({worker_id = tonumber(worker_id), released = released, reason = reason})
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.worker.removed', 'data', data)
emit(events_key, 'sched.worker.removed', '', v, data, 0)
local job = ''
if #released > 0 then
  job = follow_up({due = followups_key, jobs = followup_jobs_key}, followup_due_ms, reason,
    released, true, {})
end
return {'removed', v, cjson.encode(released), job}
