-- park.lua — park a request that fits nowhere now, or requeue it if the
-- cluster changed while it was being decided (no lost wake-ups).
--
-- Only the decision recorded for the request's current (seq, attempt) (same
-- result digest) can park it, and only from state decided: a request that
-- booked (e.g. through a duplicate decision of the same attempt) never parks.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  parked hash              gpusched:parked (request id -> parked entry JSON)
-- KEYS[3]  results stream           gpusched:results
-- KEYS[4]  audit stream             gpusched:events
-- KEYS[5]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[6]  outbox sorted set        gpusched:outbox (the decision's watchdog entry is replaced)
-- KEYS[7]  timers sorted set        gpusched:timers (the conflict back-off timer)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  result digest of the decision the step comes from
-- ARGV[8]  parked entry JSON (reasons, selectors, seq)
-- ARGV[9]  unschedulable result JSON published once per request as a notice
--          ("" = the result stored by record_decision)
-- ARGV[10] results stream MAXLEN (approximate)
-- ARGV[11] data JSON of the sched.request.parked event
-- ARGV[12] now (ms)
-- ARGV[13] wake epoch the decision started at
-- ARGV[14] outbox due time (ms) if requeued
-- ARGV[15] "1" to publish the unschedulable notice (once per request), "0" not to
--          (a request parked only because of reservation conflicts is not unschedulable)
-- ARGV[16] timer member that retries a request parked by conflicts ("" for none)
-- ARGV[17] due time (ms) of that timer
--
-- Returns {"parked", notice_entry_id or ""}; {"requeued", new_seq} when a
-- wake-capable cluster change happened since the decision began (the request
-- goes back to the outbox with seq+1 instead of waiting); {"duplicate"} when
-- already parked or done; {"stale", state} when the record is at another
-- (seq, attempt) or decision, or past state decided (booked); {"missing"}
-- for an unknown request.

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'announced', 'result',
  'result_digest')
if not r[1] then return {'missing'} end
if r[1] == 'done' or r[1] == 'parked' then return {'duplicate'} end
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] or r[6] ~= ARGV[7] or r[1] ~= 'decided' then
  return {'stale', r[1]}
end

redis.call('ZREM', KEYS[6], ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
local epoch = tonumber(redis.call('GET', KEYS[5]) or '0')
if epoch > tonumber(ARGV[13]) then
  local seq = tostring(tonumber(ARGV[5]) + 1)
  redis.call('HSET', KEYS[1], 'state', 'woken', 'seq', seq, 'attempt', '0', 'updated_ms', ARGV[12])
  redis.call('ZADD', KEYS[6], ARGV[14], ARGV[4] .. '|' .. seq .. '|0')
  emit(KEYS[4], 'sched.request.woken', ARGV[4], '',
    cjson.encode({by = 'changed_during_decision', seq = tonumber(seq)}), 0)
  return {'requeued', seq}
end

redis.call('HSET', KEYS[1], 'state', 'parked', 'parked_ms', ARGV[12], 'updated_ms', ARGV[12])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[8])
local notice = ''
if r[4] ~= '1' and ARGV[15] == '1' then
  local result = ARGV[9]
  if result == '' then result = r[5] or '' end
  notice = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*',
    'request_id', ARGV[4], 'result', result, 'status', 'unschedulable', 'terminal', '0',
    'seq', ARGV[5])
  redis.call('HSET', KEYS[1], 'announced', '1', 'notice', result)
end
if ARGV[16] ~= '' then
  redis.call('ZADD', KEYS[7], ARGV[17], ARGV[16])
end
emit(KEYS[4], 'sched.request.parked', ARGV[4], '', ARGV[11], 0)
return {'parked', notice}
