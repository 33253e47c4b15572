-- park.lua — park a request that fits nowhere now, or requeue it if the
-- cluster changed while it was being decided (no lost wake-ups).
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  parked hash              gpusched:parked (request id -> parked entry JSON)
-- KEYS[3]  results stream           gpusched:results
-- KEYS[4]  audit stream             gpusched:events
-- KEYS[5]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[6]  outbox sorted set        gpusched:outbox (the decision's watchdog entry is replaced)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  parked entry JSON (reasons, selectors, seq)
-- ARGV[8]  unschedulable result JSON published once per request as a notice
--          ("" = the result stored by record_decision)
-- ARGV[9]  results stream MAXLEN (approximate)
-- ARGV[10] data JSON of the sched.request.parked event
-- ARGV[11] now (ms)
-- ARGV[12] wake epoch the decision started at
-- ARGV[13] outbox due time (ms) if requeued
-- ARGV[14] "1" to publish the unschedulable notice (once per request), "0" not to
--          (a request parked only because of reservation conflicts is not unschedulable)
--
-- Returns {"parked", notice_entry_id or ""}; {"requeued", new_seq} when a
-- wake-capable cluster change happened since the decision began (the request
-- goes back to the outbox with seq+1 instead of waiting); {"duplicate"} when
-- already parked or done; {"stale", state} on a seq/attempt mismatch.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'announced', 'result')
if not r[1] then return {'missing'} end
if r[1] == 'done' or r[1] == 'parked' then return {'duplicate'} end
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] then return {'stale', r[1]} end

redis.call('ZREM', KEYS[6], ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
local epoch = tonumber(redis.call('GET', KEYS[5]) or '0')
if epoch > tonumber(ARGV[12]) then
  local seq = tostring(tonumber(ARGV[5]) + 1)
  redis.call('HSET', KEYS[1], 'state', 'woken', 'seq', seq, 'attempt', '0', 'updated_ms', ARGV[11])
  redis.call('ZADD', KEYS[6], ARGV[13], ARGV[4] .. '|' .. seq .. '|0')
  emit(KEYS[4], 'sched.request.woken', ARGV[4], '',
    cjson.encode({by = 'changed_during_decision', seq = tonumber(seq)}), 0)
  return {'requeued', seq}
end

redis.call('HSET', KEYS[1], 'state', 'parked', 'parked_ms', ARGV[11], 'updated_ms', ARGV[11])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[7])
local notice = ''
local result = ARGV[8]
if result == '' then result = r[5] or '' end
if r[4] ~= '1' and ARGV[14] == '1' then
  notice = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[9], '*',
    'request_id', ARGV[4], 'result', result, 'status', 'unschedulable', 'terminal', '0',
    'seq', ARGV[5])
  redis.call('HSET', KEYS[1], 'announced', '1')
end
redis.call('HSET', KEYS[1], 'result', result)
emit(KEYS[4], 'sched.request.parked', ARGV[4], '', ARGV[10], 0)
return {'parked', notice}
