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
-- Returns {"published", results_entry_id} or {"duplicate", state} when the
-- id is known (nothing is written).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'duplicate', redis.call('HGET', KEYS[1], 'state') or ''}
end
redis.call('HSET', KEYS[1], 'request', ARGV[5], 'digest', ARGV[6], 'seq', '0', 'attempt', '0',
  'created_ms', ARGV[13])
emit(KEYS[3], 'sched.request.received', ARGV[4], '', ARGV[9], 1)
emit(KEYS[3], 'sched.request.rejected', ARGV[4], '', ARGV[10], 2)
local k = {record = KEYS[1], results = KEYS[2], events = KEYS[3], parked = KEYS[4], outbox = KEYS[5]}
return {'published', finish(k, ARGV[4], 'rejected', ARGV[7], ARGV[8], '0', '0', ARGV[11],
  ARGV[12], ARGV[13], 0)}
