-- restore_booking.lua — re-create one of gpusched's bookings during a recovery.
--
-- After Redis lost its data (tasks.flows.recovery), the bookings gpusched had
-- made are re-created from an export (or the control plane's records): the
-- request record (done, scheduled, with the request so the booking can be
-- moved or released later), the instance row, its meta and claims, and the
-- booked bytes — in one step, as a cluster change (a version, the changes
-- stream and a sched.reservation.booked event, which the fold and the
-- replay apply like any booking). The instances are running: they are booked
-- whatever the capacity, and GPUs booked past it are reported
-- (sched.ledger.overbooked) like a snapshot's. Idempotent on the instance
-- key: a booking that is already there is left alone; a record left by an
-- older state (a rolled-back Redis) is overwritten.
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
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  request JSON (canonical)  ARGV[6] request digest
-- ARGV[7]  instance key (req:<request_id>)
-- ARGV[8]  instance row JSON
-- ARGV[9]  instance meta JSON without order (src, rid, pin, w)
-- ARGV[10] claims [["gpu_key", "bytes"], ...]
-- ARGV[11] data JSON of the sched.reservation.booked event / change
-- ARGV[12] the request's published result JSON, "" when unknown
-- ARGV[13] changes stream MAXLEN (approximate)
-- ARGV[14] now (ms)
--
-- Returns {"restored", version, overbooked_json} or {"present", instance_key}.

local record_key = KEYS[1]
local capacity_key = KEYS[2]
local booked_key = KEYS[3]
local instances_key = KEYS[4]
local instance_meta_key = KEYS[5]
local claims_key = KEYS[6]
local version_key = KEYS[7]
local changes_key = KEYS[8]
local events_key = KEYS[9]

local rid = ARGV[4]
local request_json = ARGV[5]
local request_digest = ARGV[6]
local instance_key = ARGV[7]
local instance_row = ARGV[8]
local instance_meta = ARGV[9]
local claims = ARGV[10]
local booked_data = ARGV[11]
local result = ARGV[12]
local changes_maxlen = ARGV[13]
local now_ms = ARGV[14]

if redis.call('HEXISTS', instances_key, instance_key) == 1 then return {'present', instance_key} end

local gpu_keys = {}
for _, pair in ipairs(decode_list(claims)) do
  if pair[2] ~= '0' then redis.call('HINCRBY', booked_key, pair[1], pair[2]) end
  gpu_keys[#gpu_keys + 1] = pair[1]
end
local over = overbooked(booked_key, capacity_key, gpu_keys)
local version = redis.call('INCR', version_key)
local v = tostring(version)
local meta = cjson.decode(instance_meta)
meta['v'] = version
meta['i'] = 0
redis.call('HSET', instances_key, instance_key, instance_row)
redis.call('HSET', instance_meta_key, instance_key, cjson.encode(meta))
redis.call('HSET', claims_key, instance_key, claims)
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.reservation.booked', 'data', booked_data)
emit(events_key, 'sched.reservation.booked', rid, v, booked_data, 0)
if #over > 0 then
  emit(events_key, 'sched.ledger.overbooked', rid, v, cjson.encode({instance_key = instance_key,
    gpus = over}), 1)
end
redis.call('DEL', record_key)
redis.call('HSET', record_key, 'state', STATE.DONE, 'status', 'scheduled', 'seq', '0', 'attempt', '0',
  'request', request_json, 'digest', request_digest, 'intake_task', '', 'pinned', meta['pin'] and '1' or '0',
  'instance', instance_key, 'booked_version', v, 'restored', '1', 'created_ms', now_ms,
  'updated_ms', now_ms)
if result ~= '' then redis.call('HSET', record_key, 'result', result) end
return {'restored', v, cjson.encode(over)}
