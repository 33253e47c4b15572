-- dead_letter.lua — park a message the redelivery guard gave up on and, if
-- that message was the one driving its request, finish the request.
--
-- The request is finished only if the message concerns its current step:
-- same (seq, attempt), same decision (result digest) for a reserve/publish
-- step, same intake task for a raw request (a stray or malformed message
-- naming a request that another message drives changes nothing). A booked
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
--
-- Returns {dead_letter_entry_id, results_entry_id or "", outcome} with
-- outcome "rejected" | "scheduled" (a result was published), "finished"
-- (the request was already done or parked), "other" (the message does not
-- drive the request) or "" (no request).

local rid = ARGV[4]
local id = redis.call('XADD', KEYS[1], '*', 'request_id', rid, 'task', ARGV[5],
  'task_id', ARGV[6], 'reason', ARGV[7], 'detail', ARGV[8], 'deliveries', ARGV[9],
  'args', ARGV[10], 'time', ARGV[2])
emit(KEYS[2], 'sched.request.dead_lettered', rid, '', cjson.encode({
  task = ARGV[5], task_id = ARGV[6], reason = ARGV[7], detail = ARGV[8],
  deliveries = tonumber(ARGV[9]), deadletter_id = id}), 0)
if rid == '' then return {id, '', ''} end

local r = redis.call('HMGET', KEYS[3], 'state', 'seq', 'attempt', 'result_digest',
  'intake_task', 'result')
local state = r[1]
if not state then
  if ARGV[20] == '' then return {id, '', 'other'} end
  redis.call('HSET', KEYS[3], 'request', ARGV[20], 'seq', '0', 'attempt', '0',
    'intake_task', ARGV[19], 'created_ms', ARGV[15])
  r = {'new', '0', '0', '', ARGV[19], nil}
else
  if r[2] ~= ARGV[16] or r[3] ~= ARGV[17] then return {id, '', 'other'} end
  if ARGV[18] ~= '' and r[4] ~= ARGV[18] then return {id, '', 'other'} end
  if ARGV[19] ~= '' and r[5] ~= ARGV[19] then return {id, '', 'other'} end
  if state == 'done' or state == 'parked' then return {id, '', 'finished'} end
end

local k = {record = KEYS[3], results = KEYS[4], events = KEYS[2], parked = KEYS[5], outbox = KEYS[6]}
if state == 'booked' and r[6] then
  local result_id = finish(k, rid, 'scheduled', r[6], r[4], r[2], r[3], ARGV[13], ARGV[14],
    ARGV[15], 1)
  return {id, result_id, 'scheduled'}
end
emit(KEYS[2], 'sched.request.rejected', rid, '', cjson.encode({
  code = 'dead_lettered', reason = ARGV[7]}), 1)
local result_id = finish(k, rid, 'rejected', ARGV[11], ARGV[12], r[2], r[3], ARGV[13], ARGV[14],
  ARGV[15], 2)
return {id, result_id, 'rejected'}
