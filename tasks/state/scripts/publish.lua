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

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'result_digest', 'result')
local state = r[1]
if not state then return {'missing'} end
if state == 'done' then return {'duplicate', state} end
if r[2] ~= ARGV[6] or r[3] ~= ARGV[7] or r[4] ~= ARGV[8] or not r[5] then
  return {'stale', state}
end
local needed = 'decided'
if ARGV[5] == 'scheduled' then needed = 'booked' end
if state ~= needed then return {'stale', state} end

if ARGV[12] ~= '' then
  emit(KEYS[3], 'sched.request.rejected', ARGV[4], '', ARGV[12], 1)
end
local k = {record = KEYS[1], results = KEYS[2], events = KEYS[3], parked = KEYS[4], outbox = KEYS[5]}
local id = finish(k, ARGV[4], ARGV[5], r[5], r[4], r[2], r[3], ARGV[9], ARGV[10], ARGV[11], 0)
return {'published', id}
