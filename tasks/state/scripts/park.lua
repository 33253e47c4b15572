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

local record_key = KEYS[1]
local parked_key = KEYS[2]
local results_key = KEYS[3]
local events_key = KEYS[4]
local epoch_key = KEYS[5]
local outbox_key = KEYS[6]
local timers_key = KEYS[7]

local rid = ARGV[4]
local seq = ARGV[5]
local attempt = ARGV[6]
local result_digest = ARGV[7]
local parked_entry = ARGV[8]
local notice_json = ARGV[9]
local results_maxlen = ARGV[10]
local parked_data = ARGV[11]
local now_ms = ARGV[12]
local decided_epoch = ARGV[13]
local requeue_due_ms = ARGV[14]
local announce = ARGV[15]
local retry_member = ARGV[16]
local retry_due_ms = ARGV[17]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'announced', 'result',
  'result_digest')
if not r[1] then return {'missing'} end
if r[1] == STATE.DONE or r[1] == STATE.PARKED then return {'duplicate'} end
if r[2] ~= seq or r[3] ~= attempt or r[6] ~= result_digest or r[1] ~= STATE.DECIDED then
  return {'stale', r[1]}
end

redis.call('ZREM', outbox_key, rid .. '|' .. seq .. '|' .. attempt)
local epoch = tonumber(redis.call('GET', epoch_key) or '0')
if epoch > tonumber(decided_epoch) then
  local next_seq = tostring(tonumber(seq) + 1)
  redis.call('HSET', record_key, 'state', STATE.WOKEN, 'seq', next_seq, 'attempt', '0',
    'updated_ms', now_ms)
  redis.call('ZADD', outbox_key, requeue_due_ms, rid .. '|' .. next_seq .. '|0')
  emit(events_key, 'sched.request.woken', rid, '',
    cjson.encode({by = 'changed_during_decision', seq = tonumber(next_seq)}), 0)
  return {'requeued', next_seq}
end

redis.call('HSET', record_key, 'state', STATE.PARKED, 'parked_ms', now_ms, 'updated_ms', now_ms)
redis.call('HSET', parked_key, rid, parked_entry)
local notice = ''
if r[4] ~= '1' and announce == '1' then
  local result = notice_json
  if result == '' then result = r[5] or '' end
  notice = redis.call('XADD', results_key, 'MAXLEN', '~', results_maxlen, '*',
    unpack(result_fields(record_key, rid, result, 'unschedulable', '0', seq)))
  redis.call('HSET', record_key, 'announced', '1', 'notice', result, 'notice_id', notice)
end
if retry_member ~= '' then
  redis.call('ZADD', timers_key, retry_due_ms, retry_member)
end
emit(events_key, 'sched.request.parked', rid, '', parked_data, 0)
return {STATE.PARKED, notice}
