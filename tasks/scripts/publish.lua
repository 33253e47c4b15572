-- publish.lua — record a request's terminal result exactly once.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  results stream           gpusched:results
-- KEYS[3]  audit stream             gpusched:events
-- KEYS[4]  parked hash              gpusched:parked
-- KEYS[5]  outbox sorted set        gpusched:outbox (the request's watchdog entry is removed)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  status: scheduled | rejected
-- ARGV[6]  result JSON, or "" to publish the result stored by record_decision
-- ARGV[7]  expected decision seq, or "" to skip the check
-- ARGV[8]  results stream MAXLEN (approximate; consumers ack well before)
-- ARGV[9]  record TTL (s) once rejected (the idempotency window; a scheduled
--          record lives until its instance is released)
-- ARGV[10] now (ms)
-- ARGV[11] result digest ("" = the digest stored by record_decision)
-- ARGV[12] data JSON of a sched.request.rejected event, "" for none
-- ARGV[13] request JSON of an edge rejection: creates the record, and only if
--          no record exists (an in-flight request is never overwritten); "" otherwise
--
-- Returns {"published", results_entry_id}; {"duplicate", state} when a
-- terminal result exists; {"stale", state} on a seq mismatch;
-- {"no_result"} if ARGV[6] is "" and nothing is stored.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local r = redis.call('HMGET', KEYS[1], 'state', 'result', 'seq', 'result_digest', 'attempt')
local state = r[1]
if state == 'done' then return {'duplicate', state} end
if state and ARGV[13] ~= '' then return {'duplicate', state} end
if state and ARGV[7] ~= '' and r[3] ~= ARGV[7] then return {'stale', state} end
local result = ARGV[6]
if result == '' then result = r[2] end
if not result then return {'no_result'} end
local seq = r[3] or '0'
local digest = ARGV[11]
if digest == '' then digest = r[4] or '' end

local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[8], '*',
  'request_id', ARGV[4], 'result', result, 'status', ARGV[5], 'terminal', '1', 'seq', seq)
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[5], 'result', result,
  'result_id', id, 'result_digest', digest, 'seq', seq, 'updated_ms', ARGV[10])
if not state then
  redis.call('HSET', KEYS[1], 'request', ARGV[13], 'attempt', '0', 'created_ms', ARGV[10])
end
if ARGV[5] ~= 'scheduled' then
  -- a scheduled record lives as long as its booking (it is needed to reschedule
  -- the instance); the release path sets its TTL
  redis.call('EXPIRE', KEYS[1], ARGV[9])
end
redis.call('HDEL', KEYS[4], ARGV[4])
redis.call('ZREM', KEYS[5], ARGV[4] .. '|' .. seq .. '|' .. (r[5] or '0'))
if ARGV[12] ~= '' then
  emit(KEYS[3], 'sched.request.rejected', ARGV[4], '', ARGV[12], 1)
end
emit(KEYS[3], 'sched.result.published', ARGV[4], '', cjson.encode({
  status = ARGV[5], terminal = true, results_id = id, result_digest = digest}), 0)
return {'published', id}
