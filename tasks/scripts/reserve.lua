-- reserve.lua — book a decided placement atomically, all or nothing.
--
-- The Omega/Nomad "plan commit": every GPU the candidate touches (leader and
-- subordinates) is re-checked against the ledger (booked + claim <= capacity);
-- only if all fit are all claims booked, the instance row stored, the cluster
-- version bumped and the change logged. A request books at most once.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  capacity hash            gpusched:ledger:capacity   (gpu key -> bytes)
-- KEYS[3]  booked hash              gpusched:ledger:booked     (gpu key -> bytes)
-- KEYS[4]  instances hash           gpusched:cluster:instances (instance key -> row JSON)
-- KEYS[5]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[6]  claims hash              gpusched:ledger:claims     (instance key -> "gk=b;...")
-- KEYS[7]  cluster version counter  gpusched:cluster:version
-- KEYS[8]  changes stream           gpusched:cluster:changes
-- KEYS[9]  audit stream             gpusched:events
-- KEYS[10] outbox sorted set        gpusched:outbox (a retry replaces the attempt's entry)
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  instance key (req:<request_id>)
-- ARGV[8]  instance row JSON
-- ARGV[9]  instance meta JSON without order (src, rid, pin, w)
-- ARGV[10] claims "gpu_key=bytes;..." (every GPU of leader and subordinates)
-- ARGV[11] data JSON of the sched.reservation.booked event / change
-- ARGV[12] max attempts per decision seq
-- ARGV[13] outbox due time (ms) of the retry if this attempt conflicts
-- ARGV[14] changes stream MAXLEN (approximate)
-- ARGV[15] now (ms)
-- ARGV[16] data JSON of the sched.request.retried event written with a retry
--
-- Returns {"booked", version}; {"duplicate", instance_key} if this request
-- already holds a booking; {"stale", state} if the record moved on;
-- {"conflict", data_json, next_attempt} after queueing the retry in the outbox
-- (state=retrying); {"exhausted", data_json} when no attempt is left;
-- {"missing"} for an unknown request.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

local r = redis.call('HMGET', KEYS[1], 'state', 'seq', 'attempt', 'instance')
if not r[1] then return {'missing'} end
if r[4] and r[4] ~= '' then return {'duplicate', r[4]} end
if r[2] ~= ARGV[5] or r[3] ~= ARGV[6] or (r[1] ~= 'decided' and r[1] ~= 'deciding') then
  return {'stale', r[1]}
end

local items = {}
local short = {}
for key, amount in string.gmatch(ARGV[10], '([^;=]+)=(%d+)') do
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
  if next_attempt < tonumber(ARGV[12]) then
    redis.call('HSET', KEYS[1], 'state', 'retrying', 'attempt', tostring(next_attempt),
      'updated_ms', ARGV[15])
    redis.call('ZREM', KEYS[10], ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
    redis.call('ZADD', KEYS[10], ARGV[13], ARGV[4] .. '|' .. ARGV[5] .. '|' .. next_attempt)
    emit(KEYS[9], 'sched.request.retried', ARGV[4], '', ARGV[16], 2)
    return {'conflict', data, tostring(next_attempt)}
  end
  return {'exhausted', data}
end

for _, item in ipairs(items) do
  if item[2] ~= '0' then redis.call('HINCRBY', KEYS[3], item[1], item[2]) end
end
local version = redis.call('INCR', KEYS[7])
local meta = cjson.decode(ARGV[9])
meta['v'] = version
meta['i'] = 0
redis.call('HSET', KEYS[4], ARGV[7], ARGV[8])
redis.call('HSET', KEYS[5], ARGV[7], cjson.encode(meta))
redis.call('HSET', KEYS[6], ARGV[7], ARGV[10])
local v = tostring(version)
redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[14], '*',
  'version', v, 'type', 'sched.reservation.booked', 'data', ARGV[11])
emit(KEYS[9], 'sched.reservation.booked', ARGV[4], v, ARGV[11], 0)
redis.call('HSET', KEYS[1], 'state', 'booked', 'instance', ARGV[7], 'booked_version', v,
  'updated_ms', ARGV[15])
return {'booked', v}
