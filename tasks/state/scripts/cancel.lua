-- cancel.lua — withdraw a request, exactly once, whatever step it is at.
--
-- A request not finished yet (queued, deciding, decided, retrying, parked,
-- woken, or booked but not yet published) gets its one terminal result, status
-- "cancelled" (finish in lib.lua: it also drops the parked entry and the
-- outbox watchdog). Every later step of its decision then refuses on its own
-- guard (the record is done): nothing books, nothing parks, nothing is
-- published. A booking made but not yet published is released in the same
-- step. A request whose "scheduled" result was published and whose booking is
-- still held has its booking released (the placement is withdrawn; no second
-- terminal result). Releases are cluster changes: the version is bumped, the
-- change logged and the wake of the freed GPUs recorded as a follow-up.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  results stream           gpusched:results
-- KEYS[3]  audit stream             gpusched:events
-- KEYS[4]  parked hash              gpusched:parked
-- KEYS[5]  outbox sorted set        gpusched:outbox
-- KEYS[6]  cluster version counter  gpusched:cluster:version
-- KEYS[7]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[8]  booked hash              gpusched:ledger:booked
-- KEYS[9]  instances hash           gpusched:cluster:instances
-- KEYS[10] instance meta hash       gpusched:cluster:instance_meta
-- KEYS[11] claims hash              gpusched:ledger:claims
-- KEYS[12] changes stream           gpusched:cluster:changes
-- KEYS[13] follow-ups sorted set    gpusched:followups
-- KEYS[14] follow-up jobs hash      gpusched:followup_jobs
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  cancelled result JSON    ARGV[6] its digest
-- ARGV[7]  results stream MAXLEN (approximate)
-- ARGV[8]  record TTL (s)           ARGV[9] now (ms)
-- ARGV[10] changes stream MAXLEN (approximate)
-- ARGV[11] follow-up due time (ms)
-- ARGV[12] who cancels (client | cluster_event | instance_deleted): the release reason
--
-- Returns {"cancelled", state_before, results_entry_id, version or ""};
-- {"released", "done", version} for a published placement whose booking was
-- released; {"already_cancelled", "done"}; {"finished", status, moved_to}
-- when the request is done and holds nothing (moved_to: the request that
-- replaced its booking, "" for none); {"unknown"} for an unknown (or expired)
-- request.

local record_key = KEYS[1]
local results_key = KEYS[2]
local events_key = KEYS[3]
local parked_key = KEYS[4]
local outbox_key = KEYS[5]
local version_key = KEYS[6]
local epoch_key = KEYS[7]
local booked_key = KEYS[8]
local instances_key = KEYS[9]
local instance_meta_key = KEYS[10]
local claims_key = KEYS[11]
local changes_key = KEYS[12]
local followups_key = KEYS[13]
local followup_jobs_key = KEYS[14]

local rid = ARGV[4]
local cancelled_json = ARGV[5]
local cancelled_digest = ARGV[6]
local results_maxlen = ARGV[7]
local record_ttl_s = ARGV[8]
local now_ms = ARGV[9]
local changes_maxlen = ARGV[10]
local followup_due_ms = ARGV[11]
local by = ARGV[12]

-- Release the booking `key` (if still held) as one cluster change; returns its version or nil.
local function release_booking(key, n)
  if not key or key == '' then return nil end
  local freed = {gpus = {}, seen = {}}
  local meta = release_instance(booked_key, instances_key, instance_meta_key, claims_key, key, freed)
  if not meta then return nil end
  local released = {{key = key, meta = meta}}
  local v = tostring(redis.call('INCR', version_key))
  redis.call('INCR', epoch_key)
  local data = cjson.encode({released = released, reason = by})
  redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
    'version', v, 'type', 'sched.instance.released', 'data', data)
  emit(events_key, 'sched.instance.released', '', v, data, n)
  follow_up({due = followups_key, jobs = followup_jobs_key}, followup_due_ms, by, released, false,
    {{kind = 'capacity_freed', workers = meta['w'], version = tonumber(v), gpus = freed.gpus}})
  return v
end

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'status', 'instance',
  'moved_to')
local state = r[1]
if not state then return {'unknown'} end

if state == STATE.DONE then
  if r[4] == 'cancelled' then return {'already_cancelled', STATE.DONE} end
  if r[4] == 'scheduled' then
    local v = release_booking(r[5], 0)
    if v then
      emit(events_key, 'sched.request.cancelled', rid, '',
        cjson.encode({state = STATE.DONE, by = by, released = r[5]}), 1)
      return {'released', STATE.DONE, v}
    end
  end
  return {'finished', r[4] or '', r[6] or ''}
end

local version = ''
if state == STATE.BOOKED then version = release_booking(r[5], 2) or '' end
emit(events_key, 'sched.request.cancelled', rid, '',
  cjson.encode({state = state, by = by, released = r[5] or cjson.null}), 3)
local k = {record = record_key, results = results_key, events = events_key, parked = parked_key,
  outbox = outbox_key}
local id = finish(k, rid, 'cancelled', cancelled_json, cancelled_digest, r[2] or '0', r[3] or '0',
  results_maxlen, record_ttl_s, now_ms, 4)
return {'cancelled', state, id, version}
