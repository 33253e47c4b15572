-- record_decision.lua — store the core's result and its step, log the decision.
--
-- The first decision recorded for a (seq, attempt) is the decision: a second
-- decider of the same attempt (a redelivered or re-driven message) never
-- overwrites it, it continues with the recorded step instead, so the result
-- published is always the one whose booking was reserved.
--
-- A decision is refused as outdated ({"outdated"}; nothing is written, the
-- decider decides again on a fresh snapshot) when it read a cluster version
-- older than the newest audit checkpoint, so every decision logged after a
-- checkpoint can be replayed from it. With ARGV[13], it is refused as outdated too
-- unless the cluster is still at that version and the request of KEYS[5] booked
-- it: a batch decides its later requests on a snapshot holding its earlier
-- bookings before they are committed, and such a decision stands only if those
-- bookings, and nothing else, made the cluster version it read (KEYS[5] is the
-- batch's last booking before it; that booking's own decision was recorded only
-- under the same rule for the booking before it, and so on back to the version
-- the batch read).
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  audit stream             gpusched:events
-- KEYS[3]  decision floor           gpusched:audit:floor
-- KEYS[4]  cluster version counter  gpusched:cluster:version (read with ARGV[13] only)
-- KEYS[5]  record of the booking that must have made ARGV[13] (read with ARGV[13] only)
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
-- ARGV[13] cluster version the cluster must still be at, "" for any
--
-- Returns {"ok", event_id}; {"outdated"}; {"duplicate", state, step_json} when a decision
-- for this (seq, attempt) is already recorded (nothing is written);
-- {"stale", state} when the record moved on.

local record_key = KEYS[1]
local events_key = KEYS[2]
local floor_key = KEYS[3]
local version_key = KEYS[4]
local booker_key = KEYS[5]

local rid = ARGV[4]
local seq = ARGV[5]
local attempt = ARGV[6]
local cluster_version = ARGV[7]
local result_json = ARGV[8]
local result_digest = ARGV[9]
local decision_data = ARGV[10]
local now_ms = ARGV[11]
local step_json = ARGV[12]
local expected_version = ARGV[13]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'step')
if r[2] ~= seq or r[3] ~= attempt then return {'stale', r[1] or ''} end
local state = r[1]
if state == STATE.DECIDING then
  if tonumber(cluster_version) < tonumber(redis.call('GET', floor_key) or '0') then
    return {'outdated'}
  end
  if expected_version and expected_version ~= '' then
    local now_at = redis.call('GET', version_key) or '0'
    if now_at ~= expected_version or redis.call('HGET', booker_key, 'booked_version') ~= expected_version then
      return {'outdated'}
    end
  end
  redis.call('HSET', record_key, 'state', STATE.DECIDED, 'result', result_json,
    'result_digest', result_digest, 'decided_version', cluster_version, 'step', step_json,
    'updated_ms', now_ms)
  local id = emit(events_key, 'sched.decision.made', rid, cluster_version, decision_data, 0)
  return {'ok', id}
end
local settled = state == STATE.DECIDED or state == STATE.BOOKED or state == STATE.PARKED
  or state == STATE.DONE
if settled and r[4] and r[4] ~= '' then return {'duplicate', state, r[4]} end
return {'stale', state or ''}
