-- worker_upsert.lua — add or update one worker (state, labels, GPU memory, ...).
--
-- Compare-and-set on the stored row, so two concurrent events about the same
-- worker cannot lose an update. Capacity entries are replaced; bookings are
-- never touched: a GPU that shrank below what is booked on it is reported
-- (sched.ledger.overbooked) and simply admits nothing until claims are released.
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  workers hash             gpusched:cluster:workers
-- KEYS[4]  worker GPU keys hash     gpusched:cluster:worker_gpus
-- KEYS[5]  capacity hash            gpusched:ledger:capacity
-- KEYS[6]  booked hash              gpusched:ledger:booked
-- KEYS[7]  changes stream           gpusched:cluster:changes
-- KEYS[8]  audit stream             gpusched:events
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  worker id
-- ARGV[5]  expected current row JSON ("" = must not exist yet; "*" = unconditional)
-- ARGV[6]  new row JSON
-- ARGV[7]  "gpu_key=capacity;..." of the new row
-- ARGV[8]  changes stream MAXLEN (approximate)
-- ARGV[9]  data JSON of the sched.worker.upserted event / change
--
-- Returns {"ok", version, overbooked_count} or {"stale"} when the row changed.

local function emit(stream, etype, rid, version, data, n)
  local eid = ARGV[1]
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', ARGV[2], 'source', ARGV[3], 'request_id', rid,
    'cluster_version', version, 'data', data)
end

if ARGV[5] ~= '*' then
  local current = redis.call('HGET', KEYS[3], ARGV[4]) or ''
  if current ~= ARGV[5] then return {'stale'} end
end

local old = redis.call('HGET', KEYS[4], ARGV[4])
if old then
  for gk in string.gmatch(old, '[^;]+') do redis.call('HDEL', KEYS[5], gk) end
end
local gpu_keys, over = {}, {}
for gk, cap in string.gmatch(ARGV[7], '([^;=]+)=(%d+)') do
  redis.call('HSET', KEYS[5], gk, cap)
  gpu_keys[#gpu_keys + 1] = gk
  local booked = tonumber(redis.call('HGET', KEYS[6], gk) or '0')
  if booked > tonumber(cap) then
    over[#over + 1] = {gpu = gk, booked = booked, capacity = tonumber(cap)}
  end
end
redis.call('HSET', KEYS[4], ARGV[4], table.concat(gpu_keys, ';'))
redis.call('HSET', KEYS[3], ARGV[4], ARGV[6])

local v = tostring(redis.call('INCR', KEYS[1]))
redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[8], '*',
  'version', v, 'type', 'sched.worker.upserted', 'data', ARGV[9])
emit(KEYS[8], 'sched.worker.upserted', '', v, ARGV[9], 0)
if #over > 0 then
  emit(KEYS[8], 'sched.ledger.overbooked', '', v,
    cjson.encode({worker_id = tonumber(ARGV[4]), gpus = over}), 1)
end
return {'ok', v, #over}
