-- release.lua — release instances and their claims (instance deleted, or an
-- unpinned booking on a worker that stayed down). Idempotent: unknown keys
-- are ignored, and a call that releases nothing changes nothing (no version
-- bump, no event, no follow-up).
--
-- The follow-up work (reschedule the released bookings, expire their
-- records, wake parked requests the freed GPUs could serve) is recorded in
-- the same step, so it survives the caller dying right after this script or
-- a retry of a script whose reply was lost.
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  booked hash              gpusched:ledger:booked
-- KEYS[4]  instances hash           gpusched:cluster:instances
-- KEYS[5]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[6]  claims hash              gpusched:ledger:claims
-- KEYS[7]  changes stream           gpusched:cluster:changes
-- KEYS[8]  audit stream             gpusched:events
-- KEYS[9]  follow-ups sorted set    gpusched:followups
-- KEYS[10] follow-up jobs hash       gpusched:followup_jobs
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  changes stream MAXLEN (approximate)
-- ARGV[5]  reason (instance_deleted | worker_lost)
-- ARGV[6]  "1" to reschedule the released gpusched bookings, "0" not to
-- ARGV[7]  wake change kind for the freed GPUs (capacity_freed), "" for none;
--          a wake also bumps the wake epoch (the freed capacity can unblock); the
--          wake fact carries the version the release produced (requests decided at
--          it or later already saw the freed GPUs) and the freed GPUs' ledger keys
--          (gpus: only their room can place a parked request)
-- ARGV[8]  follow-up due time (ms)
-- ARGV[9..] instance keys
--
-- Returns {"released", version, released_json, followup_id} (released =
-- [{key, meta}]; the follow-up id is the event id) or {"absent"}.

local version_key = KEYS[1]
local epoch_key = KEYS[2]
local booked_key = KEYS[3]
local instances_key = KEYS[4]
local instance_meta_key = KEYS[5]
local claims_key = KEYS[6]
local changes_key = KEYS[7]
local events_key = KEYS[8]
local followups_key = KEYS[9]
local followup_jobs_key = KEYS[10]

local changes_maxlen = ARGV[4]
local reason = ARGV[5]
local reschedule = ARGV[6] == '1'
local wake_kind = ARGV[7]
local followup_due_ms = ARGV[8]
local first_instance_arg = 9  -- ARGV[9..]: the instance keys

local released = {}
local workers, seen = {}, {}
local freed = {gpus = {}, seen = {}}
for i = first_instance_arg, #ARGV do
  local meta = release_instance(booked_key, instances_key, instance_meta_key, claims_key, ARGV[i], freed)
  if meta then
    released[#released + 1] = {key = ARGV[i], meta = meta}
    for _, w in ipairs(meta['w']) do
      if not seen[w] then seen[w] = true; workers[#workers + 1] = w end
    end
  end
end
if #released == 0 then return {'absent'} end

local v = tostring(redis.call('INCR', version_key))
local wake = {}
if wake_kind ~= '' then
  redis.call('INCR', epoch_key)
  table.sort(freed.gpus)
  wake = {{kind = wake_kind, workers = workers, version = tonumber(v), gpus = freed.gpus}}
end
local data = cjson.encode({released = released, reason = reason})
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.instance.released', 'data', data)
emit(events_key, 'sched.instance.released', '', v, data, 0)
local job = follow_up({due = followups_key, jobs = followup_jobs_key}, followup_due_ms, reason,
  released, reschedule, wake)
return {'released', v, cjson.encode(released), job}
