-- accept.lua — record a new request exactly once (intake idempotency).
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  audit stream             gpusched:events
-- KEYS[3]  outbox sorted set        gpusched:outbox
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  request JSON (canonical, without inline workers/model_instances)
-- ARGV[6]  request digest (sha256 of ARGV[5])
-- ARGV[7]  intake task id ("" when submitted through tasks.client)
-- ARGV[8]  now (ms)
-- ARGV[9]  data JSON of the sched.request.received event
-- ARGV[10] outbox due time (ms) for "<request_id>|0|0", "" for none
-- ARGV[11] "1" when the request pins GPUs (manual gpu_ids), else "0"
-- ARGV[12] the booking this request reschedules, "<instance key>@<booked version>", "" for none
-- ARGV[13] data JSON of the sched.instance.rescheduled event written with it, "" for none
-- ARGV[14] the request whose booking this request reschedules, "" for none (its
--          results entries carry it as reschedule_of)
--
-- Returns {"accepted", event_id} for a new request, or
-- {"duplicate", state, intake_task_id, reschedule_of, stored_digest} when the
-- id is known with the same request (then a sched.request.duplicate event is
-- written unless the caller is the same intake task, i.e. a redelivery of the
-- accepting message), or {"conflict", state, intake_task_id, reschedule_of,
-- stored_digest} when the id is known with a different request digest (a
-- sched.request.conflict event is written; nothing else changes).

local record_key = KEYS[1]
local events_key = KEYS[2]
local outbox_key = KEYS[3]

local request_id = ARGV[4]
local request_json = ARGV[5]
local request_digest = ARGV[6]
local intake_task = ARGV[7]
local now_ms = ARGV[8]
local received_data = ARGV[9]
local outbox_due_ms = ARGV[10]
local pinned = ARGV[11]
local reschedule_of = ARGV[12]
local rescheduled_data = ARGV[13]
local replaces = ARGV[14]

if redis.call('EXISTS', record_key) == 1 then
  local r = redis.call('HMGET', record_key, 'state', 'intake_task', 'reschedule_of', 'digest')
  local intake = r[2] or ''
  local stored = r[4] or ''
  if stored ~= '' and stored ~= request_digest then
    emit(events_key, 'sched.request.conflict', request_id, '',
      cjson.encode({state = r[1] or '', digest = request_digest, stored_digest = stored}), 0)
    return {'conflict', r[1] or '', intake, r[3] or '', stored}
  end
  if intake_task == '' or intake_task ~= intake then
    emit(events_key, 'sched.request.duplicate', request_id, '',
      cjson.encode({state = r[1] or '', digest = request_digest}), 0)
  end
  return {'duplicate', r[1] or '', intake, r[3] or '', stored}
end

redis.call('HSET', record_key, 'state', STATE.QUEUED, 'seq', '0', 'attempt', '0',
  'request', request_json, 'digest', request_digest, 'intake_task', intake_task,
  'created_ms', now_ms, 'updated_ms', now_ms, 'pinned', pinned,
  'reschedule_of', reschedule_of, 'replaces', replaces)
local id = emit(events_key, 'sched.request.received', request_id, '', received_data, 0)
if rescheduled_data ~= '' then
  emit(events_key, 'sched.instance.rescheduled', request_id, '', rescheduled_data, 1)
end
if outbox_due_ms ~= '' then
  redis.call('ZADD', outbox_key, outbox_due_ms, request_id .. '|0|0')
end
return {'accepted', id}
