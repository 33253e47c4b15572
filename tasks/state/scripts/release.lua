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
--          a wake also bumps the wake epoch (the freed capacity can unblock)
-- ARGV[8]  follow-up due time (ms)
-- ARGV[9..] instance keys
--
-- Returns {"released", version, released_json, followup_id} (released =
-- [{key, meta}]; the follow-up id is the event id) or {"absent"}.

local released = {}
local workers, seen = {}, {}
for i = 9, #ARGV do
  local meta = release_instance(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[i])
  if meta then
    released[#released + 1] = {key = ARGV[i], meta = meta}
    for _, w in ipairs(meta['w']) do
      if not seen[w] then seen[w] = true; workers[#workers + 1] = w end
    end
  end
end
if #released == 0 then return {'absent'} end

local v = tostring(redis.call('INCR', KEYS[1]))
local wake = {}
if ARGV[7] ~= '' then
  redis.call('INCR', KEYS[2])
  wake = {{kind = ARGV[7], workers = workers}}
end
local data = cjson.encode({released = released, reason = ARGV[5]})
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[4], '*',
  'version', v, 'type', 'sched.instance.released', 'data', data)
emit(KEYS[8], 'sched.instance.released', '', v, data, 0)
local job = follow_up({due = KEYS[9], jobs = KEYS[10]}, ARGV[8], ARGV[5], released, ARGV[6] == '1', wake)
return {'released', v, cjson.encode(released), job}
