-- dead_letter.lua — park a message the redelivery guard gave up on, and give
-- its request (if any, and not finished) a terminal "rejected" result.
--
-- KEYS[1]  dead-letter stream       gpusched:deadletter
-- KEYS[2]  audit stream             gpusched:events
-- KEYS[3]  request record hash      gpusched:req:<request_id> (any key if none)
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
-- ARGV[11] rejected result JSON for the request
-- ARGV[12] results stream MAXLEN (approximate)
-- ARGV[13] record TTL (s)           ARGV[14] now (ms)
-- ARGV[15] request JSON to store when the record does not exist, "" otherwise
--
-- Returns {dead_letter_entry_id, results_entry_id or ""}.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local rid = ARGV[4]
local id = redis.call('XADD', KEYS[1], '*', 'request_id', rid, 'task', ARGV[5],
  'task_id', ARGV[6], 'reason', ARGV[7], 'detail', ARGV[8], 'deliveries', ARGV[9],
  'args', ARGV[10], 'time', ARGV[2])
emit(KEYS[2], 'sched.request.dead_lettered', rid, '', cjson.encode({
  task = ARGV[5], task_id = ARGV[6], reason = ARGV[7], detail = ARGV[8],
  deliveries = tonumber(ARGV[9]), deadletter_id = id}), 0)
if rid == '' then return {id, ''} end

local r = redis.call('HMGET', KEYS[3], 'state', 'seq', 'attempt')
if r[1] == 'done' then return {id, ''} end
local seq = r[2] or '0'
local result_id = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[12], '*',
  'request_id', rid, 'result', ARGV[11], 'status', 'rejected', 'terminal', '1', 'seq', seq)
redis.call('HSET', KEYS[3], 'state', 'done', 'status', 'rejected', 'result', ARGV[11],
  'result_id', result_id, 'seq', seq, 'updated_ms', ARGV[14])
if not r[1] then
  redis.call('HSET', KEYS[3], 'request', ARGV[15], 'attempt', '0', 'created_ms', ARGV[14])
end
redis.call('EXPIRE', KEYS[3], ARGV[13])
redis.call('HDEL', KEYS[5], rid)
redis.call('ZREM', KEYS[6], rid .. '|' .. seq .. '|' .. (r[3] or '0'))
emit(KEYS[2], 'sched.request.rejected', rid, '', cjson.encode({
  code = 'dead_lettered', reason = ARGV[7]}), 1)
emit(KEYS[2], 'sched.result.published', rid, '', cjson.encode({
  status = 'rejected', terminal = true, results_id = result_id}), 2)
return {id, result_id}
