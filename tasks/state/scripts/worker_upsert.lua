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
-- KEYS[4]  worker GPU keys hash     gpusched:cluster:worker_gpus
-- KEYS[5]  capacity hash            gpusched:ledger:capacity
-- KEYS[6]  booked hash              gpusched:ledger:booked
-- KEYS[7]  changes stream           gpusched:cluster:changes
-- KEYS[8]  audit stream             gpusched:events
-- KEYS[9]  worker health hash       gpusched:cluster:health
-- KEYS[10] timers sorted set        gpusched:timers
-- KEYS[11] follow-ups sorted set    gpusched:followups
-- KEYS[12] follow-up jobs hash       gpusched:followup_jobs
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  expected current row JSON ("" = must not exist yet; "*" = unconditional)
-- ARGV[6]  new row JSON
-- ARGV[7]  "gpu_key=capacity;..." of the new row
-- ARGV[8]  changes stream MAXLEN (approximate)
-- ARGV[9]  data JSON of the sched.worker.upserted event / change
-- ARGV[10] wake changes JSON [{kind, workers}], "" when the change can unblock nothing
-- ARGV[11] now (ms)
-- ARGV[12] unreachable grace (ms)   ARGV[13] ready-stable period (ms)
-- ARGV[14] follow-up due time (ms)
--
-- Returns {"ok", version, overbooked_count, followup_id or ""} or
-- {"stale"} when the row changed.

local current = redis.call('HGET', KEYS[3], ARGV[4]) or ''
if ARGV[5] ~= '*' and current ~= ARGV[5] then return {'stale'} end

local old = redis.call('HGET', KEYS[4], ARGV[4])
if old then
  for gk in string.gmatch(old, '[^;]+') do redis.call('HDEL', KEYS[5], gk) end
end
local gpu_keys, over = {}, {}
for gk, cap in string.gmatch(ARGV[7], '([^;=]+)=(%d+)') do
  redis.call('HSET', KEYS[5], gk, cap)
  gpu_keys[#gpu_keys + 1] = gk
  local booked = tonumber(redis.call('HGET', KEYS[6], gk) or '0')
  if booked > tonumber(cap) then
    over[#over + 1] = {gpu = gk, booked = booked, capacity = tonumber(cap)}
  end
end
redis.call('HSET', KEYS[4], ARGV[4], table.concat(gpu_keys, ';'))
redis.call('HSET', KEYS[3], ARGV[4], ARGV[6])

local v = tostring(redis.call('INCR', KEYS[1]))
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[8], '*',
  'version', v, 'type', 'sched.worker.upserted', 'data', ARGV[9])
emit(KEYS[8], 'sched.worker.upserted', '', v, ARGV[9], 0)
if #over > 0 then
  emit(KEYS[8], 'sched.ledger.overbooked', '', v,
    cjson.encode({worker_id = tonumber(ARGV[4]), gpus = over}), 1)
end
track_health({health = KEYS[9], timers = KEYS[10], events = KEYS[8]}, ARGV[4],
  worker_state(current), worker_state(ARGV[6]), tonumber(ARGV[11]), tonumber(ARGV[12]),
  tonumber(ARGV[13]), 2)
local job = ''
if ARGV[10] ~= '' then
  redis.call('INCR', KEYS[2])
  job = follow_up({due = KEYS[11], jobs = KEYS[12]}, ARGV[14], 'worker_changed', {}, false,
    cjson.decode(ARGV[10]))
end
return {'ok', v, #over, job}
