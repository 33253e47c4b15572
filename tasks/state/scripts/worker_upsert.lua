-- worker_upsert.lua — add or update one worker (state, labels, GPU memory, ...).
--
-- Compare-and-set on the stored row, so two concurrent events about the same
-- worker cannot lose an update. Capacity entries are replaced; bookings are
-- never touched: a GPU that shrank below what is booked on it is reported
-- (sched.ledger.overbooked) and simply admits nothing until claims are
-- released. In the same step: the worker's outage clocks follow its
-- readiness (see track_health in lib.lua), and a change that can unblock
-- parked requests (ARGV[10]) bumps the wake epoch and records its wake as a
-- follow-up, so neither is lost if the caller dies or the event is redelivered.
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  workers hash             gpusched:cluster:workers
-- KEYS[4]  worker GPU keys hash     gpusched:cluster:worker_gpus (JSON arrays)
-- KEYS[5]  capacity hash            gpusched:ledger:capacity
-- KEYS[6]  booked hash              gpusched:ledger:booked
-- KEYS[7]  changes stream           gpusched:cluster:changes
-- KEYS[8]  audit stream             gpusched:events
-- KEYS[9]  worker health hash       gpusched:cluster:health
-- KEYS[10] timers sorted set        gpusched:timers
-- KEYS[11] follow-ups sorted set    gpusched:followups
-- KEYS[12] follow-up jobs hash       gpusched:followup_jobs
-- KEYS[13] vanished workers hash     gpusched:cluster:vanished (a worker back is not vanished)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  expected current row JSON ("" = must not exist yet; "*" = unconditional)
-- ARGV[6]  new row JSON
-- ARGV[7]  [["gpu_key", "capacity"], ...] of the new row
-- ARGV[8]  changes stream MAXLEN (approximate)
-- ARGV[9]  data JSON of the sched.worker.upserted event / change
-- ARGV[10] wake changes JSON [{kind, workers}], "" when the change can unblock nothing
-- ARGV[11] now (ms)
-- ARGV[12] unreachable grace (ms)   ARGV[13] ready-stable period (ms)
-- ARGV[14] follow-up due time (ms)
--
-- Returns {"ok", version, overbooked_count, followup_id or ""} or
-- {"stale"} when the row changed.

local version_key = KEYS[1]
local epoch_key = KEYS[2]
local workers_key = KEYS[3]
local worker_gpus_key = KEYS[4]
local capacity_key = KEYS[5]
local booked_key = KEYS[6]
local changes_key = KEYS[7]
local events_key = KEYS[8]
local health_key = KEYS[9]
local timers_key = KEYS[10]
local followups_key = KEYS[11]
local followup_jobs_key = KEYS[12]
local vanished_key = KEYS[13]

local worker_id = ARGV[4]
local expected_row = ARGV[5]
local new_row = ARGV[6]
local new_capacity = ARGV[7]
local changes_maxlen = ARGV[8]
local upserted_data = ARGV[9]
local wake_changes = ARGV[10]
local now_ms = tonumber(ARGV[11])
local grace_ms = tonumber(ARGV[12])
local stable_ms = tonumber(ARGV[13])
local followup_due_ms = ARGV[14]

local current = redis.call('HGET', workers_key, worker_id) or ''
if expected_row ~= '*' and current ~= expected_row then return {'stale'} end

for _, gk in ipairs(decode_list(redis.call('HGET', worker_gpus_key, worker_id))) do
  redis.call('HDEL', capacity_key, gk)
end
local gpu_keys = {}
for _, pair in ipairs(decode_list(new_capacity)) do
  redis.call('HSET', capacity_key, pair[1], pair[2])
  gpu_keys[#gpu_keys + 1] = pair[1]
end
local over = overbooked(booked_key, capacity_key, gpu_keys)
redis.call('HSET', worker_gpus_key, worker_id, encode_list(gpu_keys))
redis.call('HSET', workers_key, worker_id, new_row)
redis.call('HDEL', vanished_key, worker_id)

local v = tostring(redis.call('INCR', version_key))
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.worker.upserted', 'data', upserted_data)
emit(events_key, 'sched.worker.upserted', '', v, upserted_data, 0)
if #over > 0 then
  emit(events_key, 'sched.ledger.overbooked', '', v,
    cjson.encode({worker_id = tonumber(worker_id), gpus = over}), 1)
end
track_health({health = health_key, timers = timers_key, events = events_key}, worker_id,
  worker_state(current), worker_state(new_row), now_ms, grace_ms, stable_ms, 2)
local job = ''
if wake_changes ~= '' then
  redis.call('INCR', epoch_key)
  job = follow_up({due = followups_key, jobs = followup_jobs_key}, followup_due_ms,
    'worker_changed', {}, false, cjson.decode(wake_changes))
end
return {'ok', v, #over, job}
