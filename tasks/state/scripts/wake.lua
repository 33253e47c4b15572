-- wake.lua — move parked requests back to the queue (through the outbox).
--
-- KEYS[1]  parked hash              gpusched:parked
-- KEYS[2]  outbox sorted set        gpusched:outbox
-- KEYS[3]  audit stream             gpusched:events
-- KEYS[4..] the request record hash of each request to wake, in ARGV order
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  outbox due time (ms)
-- ARGV[5]  data JSON of the sched.request.woken events (what woke them)
-- ARGV[6], ARGV[7], ...  pairs (request id, parked seq), one per KEYS[4..]
--
-- A request is woken only if it is still parked at that seq; its seq is
-- incremented (a new decision) and "<request_id>|<seq>|0" enters the outbox.
-- Returns a flat list {request_id, new_seq, ...} of the requests woken.

local parked_key = KEYS[1]
local outbox_key = KEYS[2]
local events_key = KEYS[3]
local first_record = 4  -- KEYS[4..]: one request record per (request id, seq) pair

local outbox_due_ms = ARGV[4]
local woken_data = ARGV[5]
local first_pair_arg = 6  -- ARGV[6..]: (request id, parked seq) pairs

local woken = {}
for i = first_record, #KEYS do
  local rid = ARGV[first_pair_arg + (i - first_record) * 2]
  local seq = ARGV[first_pair_arg + 1 + (i - first_record) * 2]
  local r = redis.call('HMGET', KEYS[i], 'state', 'seq')
  if r[1] == STATE.PARKED and r[2] == seq and redis.call('HEXISTS', parked_key, rid) == 1 then
    local next_seq = tostring(tonumber(seq) + 1)
    redis.call('HSET', KEYS[i], 'state', STATE.WOKEN, 'seq', next_seq, 'attempt', '0')
    redis.call('HDEL', parked_key, rid)
    redis.call('ZADD', outbox_key, outbox_due_ms, rid .. '|' .. next_seq .. '|0')
    emit(events_key, 'sched.request.woken', rid, '', woken_data, i - first_record + 1)
    woken[#woken + 1] = rid
    woken[#woken + 1] = next_seq
  end
end
return woken
