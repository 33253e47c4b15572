-- begin.lua — claim one decision attempt and read the request it concerns.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
--
-- ARGV[1]  decision seq the message carries
-- ARGV[2]  attempt the message carries
-- ARGV[3]  task id of the deciding message
-- ARGV[4]  now (ms)
--
-- Returns {"ok", request_json, wake_epoch, created_ms} and sets state=deciding when the
-- record is at this (seq, attempt) and waiting for (or in) its decision;
-- {"resume", state, step_json} when this (seq, attempt) is already decided
-- (state decided or booked): the caller continues with the recorded step
-- instead of deciding again (one decision per attempt, whoever delivers it);
-- {"stale", state, seq, attempt} when the message is behind the record;
-- {"skip", state} when the record is parked or done; {"missing"} for an
-- unknown request.

local record_key = KEYS[1]
local epoch_key = KEYS[2]

local seq = ARGV[1]
local attempt = ARGV[2]
local task_id = ARGV[3]
local now_ms = ARGV[4]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'request', 'step', 'created_ms')
if not r[1] then return {'missing'} end
local state = r[1]
if r[2] ~= seq or r[3] ~= attempt then
  return {'stale', state, r[2] or '', r[3] or ''}
end
if state == STATE.QUEUED or state == STATE.RETRYING or state == STATE.WOKEN or state == STATE.DECIDING then
  redis.call('HSET', record_key, 'state', STATE.DECIDING, 'decider', task_id, 'updated_ms', now_ms)
  local epoch = redis.call('GET', epoch_key) or '0'
  return {'ok', r[4], epoch, r[6] or '0'}
end
if (state == STATE.DECIDED or state == STATE.BOOKED) and r[5] and r[5] ~= '' then
  return {'resume', state, r[5]}
end
return {'skip', state}
