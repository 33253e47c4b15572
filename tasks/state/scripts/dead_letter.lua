-- dead_letter.lua — park a message the redelivery guard gave up on and, if
-- that message was the one driving its request, finish the request.
--
-- The request is finished only if the message provably drives its current
-- step: same (seq, attempt), and for a decide message the record's decider is
-- this message (it claimed the attempt in begin.lua), for a reserve/publish
-- step the same decision (result digest), for a raw request the same intake
-- task. A stray or forged message naming a request that another message
-- drives changes nothing, and a message that failed validation (ARGV[21] "0")
-- never finishes a request. A booked
-- request gets its recorded "scheduled" result (the booking is valid; this is
-- what the lost publish step would have published); any other unfinished one
-- a terminal "rejected" result (error.code = dead_lettered).
--
-- KEYS[1]  dead-letter stream       gpusched:deadletter
-- KEYS[2]  audit stream             gpusched:events
-- KEYS[3]  request record hash      gpusched:req:<request_id> (gpusched:req:- if none)
-- KEYS[4]  results stream           gpusched:results
-- KEYS[5]  parked hash              gpusched:parked
-- KEYS[6]  outbox sorted set        gpusched:outbox (the request's watchdog entry is removed)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id, "" when the message concerns no request
-- ARGV[5]  task name                ARGV[6] task id
-- ARGV[7]  reason code (worker_lost_repeatedly | task_error)
-- ARGV[8]  detail text              ARGV[9] deliveries counted
-- ARGV[10] message arguments JSON
-- ARGV[11] rejected result JSON     ARGV[12] its digest
-- ARGV[13] results stream MAXLEN (approximate)
-- ARGV[14] record TTL (s)           ARGV[15] now (ms)
-- ARGV[16] decision seq the message carries
-- ARGV[17] attempt the message carries
-- ARGV[18] result digest the message carries, "" for a decide message
-- ARGV[19] intake task id when the message is a raw request (its own task id), else ""
-- ARGV[20] request JSON of a raw request, stored when no record exists, else ""
-- ARGV[21] "1" to finish the request the message drives, "0" to record the dead letter only
--
-- Returns {dead_letter_entry_id, results_entry_id or "", outcome} with
-- outcome "rejected" | "scheduled" (a result was published), "finished"
-- (the request was already done or parked), "other" (the message does not
-- drive the request) or "" (no request).

local deadletter_key = KEYS[1]
local events_key = KEYS[2]
local record_key = KEYS[3]
local results_key = KEYS[4]
local parked_key = KEYS[5]
local outbox_key = KEYS[6]

local rid = ARGV[4]
local task_name = ARGV[5]
local task_id = ARGV[6]
local reason = ARGV[7]
local detail = ARGV[8]
local deliveries = ARGV[9]
local args_json = ARGV[10]
local rejected_json = ARGV[11]
local rejected_digest = ARGV[12]
local results_maxlen = ARGV[13]
local record_ttl_s = ARGV[14]
local now_ms = ARGV[15]
local message_seq = ARGV[16]
local message_attempt = ARGV[17]
local message_digest = ARGV[18]
local intake_task = ARGV[19]
local raw_request_json = ARGV[20]
local may_finish = ARGV[21] == '1'

local id = redis.call('XADD', deadletter_key, '*', 'request_id', rid, 'task', task_name,
  'task_id', task_id, 'reason', reason, 'detail', detail, 'deliveries', deliveries,
  'args', args_json, 'time', event_time)
emit(events_key, 'sched.request.dead_lettered', rid, '', cjson.encode({
  task = task_name, task_id = task_id, reason = reason, detail = detail,
  deliveries = tonumber(deliveries), deadletter_id = id}), 0)
if rid == '' then return {id, '', ''} end
if not may_finish then return {id, '', 'other'} end

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'result_digest',
  'intake_task', 'result', 'decider')
local state = r[1]
if not state then
  if raw_request_json == '' then return {id, '', 'other'} end
  redis.call('HSET', record_key, 'request', raw_request_json, 'seq', '0', 'attempt', '0',
    'intake_task', intake_task, 'created_ms', now_ms)
  r = {'new', '0', '0', '', intake_task, nil}
else
  if r[2] ~= message_seq or r[3] ~= message_attempt then return {id, '', 'other'} end
  if message_digest ~= '' and r[4] ~= message_digest then return {id, '', 'other'} end
  if intake_task ~= '' and r[5] ~= intake_task then return {id, '', 'other'} end
  -- a decide message by id owns the attempt only if it claimed it (begin.lua set it decider)
  if message_digest == '' and intake_task == '' and r[7] ~= task_id then return {id, '', 'other'} end
  if state == STATE.DONE or state == STATE.PARKED then return {id, '', 'finished'} end
end

local k = {record = record_key, results = results_key, events = events_key, parked = parked_key,
  outbox = outbox_key}
if state == STATE.BOOKED and r[6] then
  local result_id = finish(k, rid, 'scheduled', r[6], r[4], r[2], r[3], results_maxlen,
    record_ttl_s, now_ms, 1)
  return {id, result_id, 'scheduled'}
end
emit(events_key, 'sched.request.rejected', rid, '', cjson.encode({
  code = 'dead_lettered', reason = reason}), 1)
local result_id = finish(k, rid, 'rejected', rejected_json, rejected_digest, r[2], r[3],
  results_maxlen, record_ttl_s, now_ms, 2)
return {id, result_id, 'rejected'}
