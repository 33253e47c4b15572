-- expire_parked.lua — finish a request that waited parked for too long.
--
-- Only a request still parked at the seq the caller saw: it gets its terminal
-- result, the unschedulable result it was parked with (status unschedulable,
-- terminal 1), its record expires like any finished one, and
-- sched.request.expired says why.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  parked hash              gpusched:parked
-- KEYS[3]  results stream           gpusched:results
-- KEYS[4]  audit stream             gpusched:events
-- KEYS[5]  outbox sorted set        gpusched:outbox
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  parked seq the caller saw
-- ARGV[6]  results stream MAXLEN (approximate)
-- ARGV[7]  record TTL (s) once finished
-- ARGV[8]  now (ms)
-- ARGV[9]  data JSON of the sched.request.expired event
--
-- Returns {"expired", results entry id} or {"stale", state}.

local record_key = KEYS[1]
local parked_key = KEYS[2]
local results_key = KEYS[3]
local events_key = KEYS[4]
local outbox_key = KEYS[5]

local rid = ARGV[4]
local seq = ARGV[5]
local results_maxlen = ARGV[6]
local record_ttl_s = ARGV[7]
local now_ms = ARGV[8]
local expired_data = ARGV[9]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'notice', 'result',
  'result_digest')
if r[1] ~= STATE.PARKED or r[2] ~= seq then
  if not r[1] then redis.call('HDEL', parked_key, rid) end  -- a record that is gone waits for nothing
  return {'stale', r[1] or ''}
end
local result = r[4]
if not result or result == '' then result = r[5] or '' end
emit(events_key, 'sched.request.expired', rid, '', expired_data, 1)
local k = {record = record_key, results = results_key, events = events_key, parked = parked_key,
  outbox = outbox_key}
local id = finish(k, rid, 'unschedulable', result, r[6] or '', r[2], r[3] or '0', results_maxlen,
  record_ttl_s, now_ms, 0)
return {'expired', id}
