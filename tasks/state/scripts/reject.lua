-- reject.lua — the edge rejection of an invalid request: its terminal
-- "rejected" result, recorded only if the id is new (an in-flight or
-- finished request is never overwritten).
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  results stream           gpusched:results
-- KEYS[3]  audit stream             gpusched:events
-- KEYS[4]  parked hash              gpusched:parked
-- KEYS[5]  outbox sorted set        gpusched:outbox
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  request JSON as received (canonical)
-- ARGV[6]  request digest (sha256 of ARGV[5])
-- ARGV[7]  rejected result JSON     ARGV[8] its digest
-- ARGV[9]  data JSON of the sched.request.received event
-- ARGV[10] data JSON of the sched.request.rejected event
-- ARGV[11] results stream MAXLEN (approximate)
-- ARGV[12] record TTL (s)           ARGV[13] now (ms)
--
-- Returns {"published", results_entry_id}; {"duplicate", state, stored_digest}
-- when the id is known with the same request (nothing is written); or
-- {"conflict", state, stored_digest} when it is known with a different one
-- (only a sched.request.conflict event is written).

local record_key = KEYS[1]
local results_key = KEYS[2]
local events_key = KEYS[3]
local parked_key = KEYS[4]
local outbox_key = KEYS[5]

local rid = ARGV[4]
local request_json = ARGV[5]
local request_digest = ARGV[6]
local rejected_json = ARGV[7]
local rejected_digest = ARGV[8]
local received_data = ARGV[9]
local rejected_data = ARGV[10]
local results_maxlen = ARGV[11]
local record_ttl_s = ARGV[12]
local now_ms = ARGV[13]

if redis.call('EXISTS', record_key) == 1 then
  local known = redis.call('HMGET', record_key, 'state', 'digest')
  local stored = known[2] or ''
  if stored ~= '' and stored ~= request_digest then
    emit(events_key, 'sched.request.conflict', rid, '',
      cjson.encode({state = known[1] or '', digest = request_digest, stored_digest = stored}), 0)
    return {'conflict', known[1] or '', stored}
  end
  return {'duplicate', known[1] or '', stored}
end
redis.call('HSET', record_key, 'request', request_json, 'digest', request_digest, 'seq', '0',
  'attempt', '0', 'created_ms', now_ms)
emit(events_key, 'sched.request.received', rid, '', received_data, 1)
emit(events_key, 'sched.request.rejected', rid, '', rejected_data, 2)
local k = {record = record_key, results = results_key, events = events_key, parked = parked_key,
  outbox = outbox_key}
return {'published', finish(k, rid, 'rejected', rejected_json, rejected_digest, '0', '0',
  results_maxlen, record_ttl_s, now_ms, 0)}
