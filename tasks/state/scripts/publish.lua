-- publish.lua — publish a decided request's terminal result exactly once.
--
-- Only the decision recorded for the request's current (seq, attempt) is
-- published (same result digest), and a "scheduled" result only once its
-- booking is made (state booked); a "rejected" one (the core rejected the
-- stored request) from state decided.
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
-- ARGV[6]  decision seq             ARGV[7] attempt
-- ARGV[8]  result digest of the decision the step comes from
-- ARGV[9]  results stream MAXLEN (approximate; consumers ack well before)
-- ARGV[10] record TTL (s) once rejected (the idempotency window; a scheduled
--          record lives until its instance is released)
-- ARGV[11] now (ms)
-- ARGV[12] data JSON of a sched.request.rejected event, "" for none
--
-- Returns {"published", results_entry_id}; {"duplicate", "done"} when a
-- terminal result exists; {"stale", state} when the record is at another
-- (seq, attempt) or decision, or not ready for this status; {"missing"}.

local record_key = KEYS[1]
local results_key = KEYS[2]
local events_key = KEYS[3]
local parked_key = KEYS[4]
local outbox_key = KEYS[5]

local rid = ARGV[4]
local status = ARGV[5]
local seq = ARGV[6]
local attempt = ARGV[7]
local result_digest = ARGV[8]
local results_maxlen = ARGV[9]
local record_ttl_s = ARGV[10]
local now_ms = ARGV[11]
local rejected_data = ARGV[12]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'result_digest', 'result')
local state = r[1]
if not state then return {'missing'} end
if state == STATE.DONE then return {'duplicate', state} end
if r[2] ~= seq or r[3] ~= attempt or r[4] ~= result_digest or not r[5] then
  return {'stale', state}
end
local needed = STATE.DECIDED
if status == 'scheduled' then needed = STATE.BOOKED end
if state ~= needed then return {'stale', state} end

if rejected_data ~= '' then
  emit(events_key, 'sched.request.rejected', rid, '', rejected_data, 1)
end
local k = {record = record_key, results = results_key, events = events_key, parked = parked_key,
  outbox = outbox_key}
local id = finish(k, rid, status, r[5], r[4], r[2], r[3], results_maxlen, record_ttl_s, now_ms, 0)
return {'published', id}
