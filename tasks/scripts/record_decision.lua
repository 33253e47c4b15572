-- record_decision.lua — store the core's result and log the decision event.
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
--
-- Returns {"ok", event_id}, or {"stale", state} when the record moved on
-- (another attempt or decision superseded this one; nothing is written).

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt')
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] or (r[1] ~= 'deciding' and r[1] ~= 'decided') then
  return {'stale', r[1] or ''}
end
redis.call('HSET', KEYS[1], 'state', 'decided', 'result', ARGV[8], 'result_digest', ARGV[9],
  'decided_version', ARGV[7], 'updated_ms', ARGV[11])
local id = emit(KEYS[2], 'sched.decision.made', ARGV[4], ARGV[7], ARGV[10], 0)
return {'ok', id}
