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
--
-- Returns {"accepted", event_id} for a new request, or
-- {"duplicate", state, intake_task_id, reschedule_of} when the id is known
-- (then a sched.request.duplicate event is written unless the caller is the
-- same intake task, i.e. a redelivery of the accepting message).

if redis.call('EXISTS', KEYS[1]) == 1 then
  local r = redis.call('HMGET', KEYS[1], 'state', 'intake_task', 'reschedule_of')
  local intake = r[2] or ''
  if ARGV[7] == '' or ARGV[7] ~= intake then
    emit(KEYS[2], 'sched.request.duplicate', ARGV[4], '',
      cjson.encode({state = r[1] or '', digest = ARGV[6]}), 0)
  end
  return {'duplicate', r[1] or '', intake, r[3] or ''}
end

redis.call('HSET', KEYS[1], 'state', 'queued', 'seq', '0', 'attempt', '0',
  'request', ARGV[5], 'digest', ARGV[6], 'intake_task', ARGV[7],
  'created_ms', ARGV[8], 'updated_ms', ARGV[8], 'pinned', ARGV[11],
  'reschedule_of', ARGV[12])
local id = emit(KEYS[2], 'sched.request.received', ARGV[4], '', ARGV[9], 0)
if ARGV[13] ~= '' then
  emit(KEYS[2], 'sched.instance.rescheduled', ARGV[4], '', ARGV[13], 1)
end
if ARGV[10] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[10], ARGV[4] .. '|0|0')
end
return {'accepted', id}
