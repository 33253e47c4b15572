-- record_decision.lua — store the core's result and its step, log the decision.
--
-- The first decision recorded for a (seq, attempt) is the decision: a second
-- decider of the same attempt (a redelivered or re-driven message) never
-- overwrites it, it continues with the recorded step instead, so the result
-- published is always the one whose booking was reserved.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  audit stream             gpusched:events
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  cluster version the decision read
-- ARGV[8]  result JSON (Contract 1)
-- ARGV[9]  result digest (sha256 of ARGV[8])
-- ARGV[10] data JSON of the sched.decision.made event
-- ARGV[11] now (ms)
-- ARGV[12] step JSON (what reserve/park/publish continue with)
--
-- Returns {"ok", event_id}; {"duplicate", state, step_json} when a decision
-- for this (seq, attempt) is already recorded (nothing is written);
-- {"stale", state} when the record moved on.

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'step')
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] then return {'stale', r[1] or ''} end
local state = r[1]
if state == 'deciding' then
  redis.call('HSET', KEYS[1], 'state', 'decided', 'result', ARGV[8], 'result_digest', ARGV[9],
    'decided_version', ARGV[7], 'step', ARGV[12], 'updated_ms', ARGV[11])
  local id = emit(KEYS[2], 'sched.decision.made', ARGV[4], ARGV[7], ARGV[10], 0)
  return {'ok', id}
end
local settled = state == 'decided' or state == 'booked' or state == 'parked' or state == 'done'
if settled and r[4] and r[4] ~= '' then return {'duplicate', state, r[4]} end
return {'stale', state or ''}
