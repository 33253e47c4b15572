-- reserve.lua — book a decided placement atomically, all or nothing.
--
-- The Omega/Nomad "plan commit": every GPU the candidate touches (leader and
-- subordinates) is re-checked against the ledger (booked + claim <= capacity);
-- only if all fit are all claims booked, the instance row stored, the cluster
-- version bumped and the change logged. A request books at most once, and
-- only the decision recorded for its current (seq, attempt) (same result
-- digest) can book: what is booked is what publish.lua publishes.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  capacity hash            gpusched:ledger:capacity
-- KEYS[3]  booked hash              gpusched:ledger:booked
-- KEYS[4]  instances hash           gpusched:cluster:instances
-- KEYS[5]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[6]  claims hash              gpusched:ledger:claims
-- KEYS[7]  cluster version counter  gpusched:cluster:version
-- KEYS[8]  changes stream           gpusched:cluster:changes
-- KEYS[9]  audit stream             gpusched:events
-- KEYS[10] outbox sorted set        gpusched:outbox
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  result digest of the decision this booking comes from
-- ARGV[8]  instance key (req:<request_id>)
-- ARGV[9]  instance row JSON
-- ARGV[10] instance meta JSON without order (src, rid, pin, w)
-- ARGV[11] claims "gpu_key=bytes;..." (every GPU of leader and subordinates)
-- ARGV[12] data JSON of the sched.reservation.booked event / change
-- ARGV[13] max attempts per decision seq
-- ARGV[14] outbox due time (ms) of the retry if this attempt conflicts
-- ARGV[15] changes stream MAXLEN (approximate)
-- ARGV[16] now (ms)
-- ARGV[17] data JSON of the sched.request.retried event written with a retry
--
-- Returns {"booked", version}; {"duplicate", instance_key} if this decision
-- already booked; {"stale", state} if the record moved on or holds another
-- decision; {"conflict", data_json, next_attempt} after queueing the retry in
-- the outbox (state=retrying); {"exhausted", data_json} when no attempt is
-- left; {"missing"} for an unknown request.

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'result_digest', 'instance')
if not r[1] then return {'missing'} end
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] or r[4] ~= ARGV[7] then return {'stale', r[1]} end
if r[5] and r[5] ~= '' then return {'duplicate', r[5]} end
if r[1] ~= 'decided' then return {'stale', r[1]} end

local items = {}
local short = {}
for key, amount in string.gmatch(ARGV[11], '([^;=]+)=(%d+)') do
  items[#items + 1] = {key, amount}
  local cap = redis.call('HGET', KEYS[2], key)
  local booked = tonumber(redis.call('HGET', KEYS[3], key) or '0')
  local claim = tonumber(amount)
  if not cap then
    short[#short + 1] = {gpu = key, booked = booked, claim = claim, capacity = cjson.null}
  elseif booked + claim > tonumber(cap) then
    short[#short + 1] = {gpu = key, booked = booked, claim = claim, capacity = tonumber(cap)}
  end
end

if #short > 0 then
  local attempt = tonumber(ARGV[6])
  local data = cjson.encode({attempt = attempt, gpus = short})
  emit(KEYS[9], 'sched.reservation.conflicted', ARGV[4], '', data, 1)
  local next_attempt = attempt + 1
  if next_attempt < tonumber(ARGV[13]) then
    redis.call('HSET', KEYS[1], 'state', 'retrying', 'attempt', tostring(next_attempt),
      'updated_ms', ARGV[16])
    redis.call('ZREM', KEYS[10], ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
    redis.call('ZADD', KEYS[10], ARGV[14], ARGV[4] .. '|' .. ARGV[5] .. '|' .. next_attempt)
    emit(KEYS[9], 'sched.request.retried', ARGV[4], '', ARGV[17], 2)
    return {'conflict', data, tostring(next_attempt)}
  end
  return {'exhausted', data}
end

for _, item in ipairs(items) do
  if item[2] ~= '0' then redis.call('HINCRBY', KEYS[3], item[1], item[2]) end
end
local version = redis.call('INCR', KEYS[7])
local meta = cjson.decode(ARGV[10])
meta['v'] = version
meta['i'] = 0
redis.call('HSET', KEYS[4], ARGV[8], ARGV[9])
redis.call('HSET', KEYS[5], ARGV[8], cjson.encode(meta))
redis.call('HSET', KEYS[6], ARGV[8], ARGV[11])
local v = tostring(version)
redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[15], '*',
  'version', v, 'type', 'sched.reservation.booked', 'data', ARGV[12])
emit(KEYS[9], 'sched.reservation.booked', ARGV[4], v, ARGV[12], 0)
redis.call('HSET', KEYS[1], 'state', 'booked', 'instance', ARGV[8], 'booked_version', v,
  'updated_ms', ARGV[16])
return {'booked', v}
