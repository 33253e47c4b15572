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
-- ARGV[11] claims [["gpu_key", "bytes"], ...] (every GPU of leader and subordinates)
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

local record_key = KEYS[1]
local capacity_key = KEYS[2]
local booked_key = KEYS[3]
local instances_key = KEYS[4]
local instance_meta_key = KEYS[5]
local claims_key = KEYS[6]
local version_key = KEYS[7]
local changes_key = KEYS[8]
local events_key = KEYS[9]
local outbox_key = KEYS[10]

local rid = ARGV[4]
local seq = ARGV[5]
local attempt = ARGV[6]
local result_digest = ARGV[7]
local instance_key = ARGV[8]
local instance_row = ARGV[9]
local instance_meta = ARGV[10]
local claims = ARGV[11]
local booked_data = ARGV[12]
local max_attempts = tonumber(ARGV[13])
local retry_due_ms = ARGV[14]
local changes_maxlen = ARGV[15]
local now_ms = ARGV[16]
local retried_data = ARGV[17]

local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'result_digest', 'instance')
if not r[1] then return {'missing'} end
if r[2] ~= seq or r[3] ~= attempt or r[4] ~= result_digest then return {'stale', r[1]} end
if r[5] and r[5] ~= '' then return {'duplicate', r[5]} end
if r[1] ~= STATE.DECIDED then return {'stale', r[1]} end

local items = {}
local short = {}
for _, pair in ipairs(decode_list(claims)) do
  local key, amount = pair[1], pair[2]
  items[#items + 1] = {key, amount}
  local cap = redis.call('HGET', capacity_key, key)
  local booked = tonumber(redis.call('HGET', booked_key, key) or '0')
  local claim = tonumber(amount)
  if not cap then
    short[#short + 1] = {gpu = key, booked = booked, claim = claim, capacity = cjson.null}
  elseif booked + claim > tonumber(cap) then
    short[#short + 1] = {gpu = key, booked = booked, claim = claim, capacity = tonumber(cap)}
  end
end

if #short > 0 then
  local data = cjson.encode({attempt = tonumber(attempt), gpus = short})
  emit(events_key, 'sched.reservation.conflicted', rid, '', data, 1)
  local next_attempt = tonumber(attempt) + 1
  if next_attempt < max_attempts then
    redis.call('HSET', record_key, 'state', STATE.RETRYING, 'attempt', tostring(next_attempt),
      'updated_ms', now_ms)
    redis.call('ZREM', outbox_key, rid .. '|' .. seq .. '|' .. attempt)
    redis.call('ZADD', outbox_key, retry_due_ms, rid .. '|' .. seq .. '|' .. next_attempt)
    emit(events_key, 'sched.request.retried', rid, '', retried_data, 2)
    return {'conflict', data, tostring(next_attempt)}
  end
  return {'exhausted', data}
end

for _, item in ipairs(items) do
  if item[2] ~= '0' then redis.call('HINCRBY', booked_key, item[1], item[2]) end
end
local version = redis.call('INCR', version_key)
local meta = cjson.decode(instance_meta)
meta['v'] = version
meta['i'] = 0
redis.call('HSET', instances_key, instance_key, instance_row)
redis.call('HSET', instance_meta_key, instance_key, cjson.encode(meta))
redis.call('HSET', claims_key, instance_key, claims)
local v = tostring(version)
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.reservation.booked', 'data', booked_data)
emit(events_key, 'sched.reservation.booked', rid, v, booked_data, 0)
redis.call('HSET', record_key, 'state', STATE.BOOKED, 'instance', instance_key, 'booked_version', v,
  'updated_ms', now_ms)
return {STATE.BOOKED, v}
