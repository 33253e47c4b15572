-- cluster_apply.lua — replace the cluster with a control-plane snapshot.
--
-- Workers and control-plane instances are replaced wholesale; instances booked
-- by gpusched are kept when all their workers are still present (unless the
-- snapshot takes them over, see ARGV[7]); the rest are dropped. The ledger
-- (capacity, booked) is rebuilt from scratch and GPUs booked past their
-- capacity are reported (sched.ledger.overbooked), the snapshot stored once
-- under its digest, the version and the wake epoch bumped and the change
-- logged with a reference to the digest (never the whole snapshot). Every
-- worker's outage clocks follow its readiness in the snapshot like for a
-- worker_state event (track_health in lib.lua); vanished workers lose their
-- clocks and are recorded as vanished (the mass-outage guard counts them as
-- down for unreachable_grace_s; a worker listed again is not vanished). The
-- follow-up work (reschedule the dropped bookings — their rows and claims are
-- kept in the job, so that a booking whose workers come back before its
-- rescheduling is booked again —, wake the parked requests the snapshot's real
-- changes could unblock) is recorded in the same step.
--
-- The wake: the caller derives the workers' changes (added, ready, labels,
-- cluster, renamed, capacity increased: ARGV[14]) from the stored rows it read
-- at cluster version ARGV[15]; this script adds capacity_freed for every worker
-- one of whose GPUs has less booked than before (with those GPUs' ledger keys,
-- gpus: the only room that grew). Every fact carries the new
-- version. A snapshot that changes nothing wake-relevant wakes nobody and does
-- not bump the wake epoch. When the version moved since the caller's read (a
-- change raced it), or ARGV[14] is "" (a recovery), every parked request is woken
-- instead ({kind = snapshot}): woken in vain, never forgotten.
--
-- A snapshot that would remove more than ARGV[12] of the stored workers is
-- refused, nothing written, unless ARGV[13] confirms the removal: a truncated
-- or empty snapshot must not drop a cluster.
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  wake epoch counter       gpusched:cluster:epoch
-- KEYS[3]  workers hash             gpusched:cluster:workers
-- KEYS[4]  worker GPU keys hash     gpusched:cluster:worker_gpus (JSON arrays)
-- KEYS[5]  capacity hash            gpusched:ledger:capacity
-- KEYS[6]  booked hash              gpusched:ledger:booked
-- KEYS[7]  instances hash           gpusched:cluster:instances
-- KEYS[8]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[9]  claims hash              gpusched:ledger:claims
-- KEYS[10] changes stream           gpusched:cluster:changes
-- KEYS[11] audit stream             gpusched:events
-- KEYS[12] snapshot key             gpusched:snapshot:<sha256>
-- KEYS[13] worker health hash       gpusched:cluster:health
-- KEYS[14] timers sorted set        gpusched:timers
-- KEYS[15] follow-ups sorted set    gpusched:followups
-- KEYS[16] follow-up jobs hash       gpusched:followup_jobs
-- KEYS[17] vanished workers hash     gpusched:cluster:vanished
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  snapshot digest (sha256 of ARGV[5])
-- ARGV[5]  snapshot JSON {"workers": [...], "model_instances": [...]}
-- ARGV[6]  changes stream MAXLEN (approximate)
-- ARGV[7]  JSON array of the request ids whose bookings the snapshot now lists itself
-- ARGV[8]  now (ms)
-- ARGV[9]  unreachable grace (ms)   ARGV[10] ready-stable period (ms)
-- ARGV[11] follow-up due time (ms)
-- ARGV[12] largest fraction of the stored workers the snapshot may remove unconfirmed
-- ARGV[13] "1" when the removal is confirmed (allow_removal), else "0"
-- ARGV[14] the workers' wake facts JSON [{kind, workers}] ("" = wake every parked request)
-- ARGV[15] the cluster version those facts were derived at
-- ARGV[16..] number of workers W, then W triples: worker id, row JSON,
--          [["gpu_key", "capacity"], ...]; then number of instances I, then I
--          quadruples: instance key, row JSON, meta JSON without order,
--          [["gpu_key", "bytes"], ...] claims
--
-- Returns {"applied", version, dropped_json, followup_id}: dropped = [{key,
-- meta, row, claims}] bookings whose workers are gone; or {"refused",
-- removed, stored} (nothing written).

local version_key = KEYS[1]
local epoch_key = KEYS[2]
local workers_key = KEYS[3]
local worker_gpus_key = KEYS[4]
local capacity_key = KEYS[5]
local booked_key = KEYS[6]
local instances_key = KEYS[7]
local instance_meta_key = KEYS[8]
local claims_key = KEYS[9]
local changes_key = KEYS[10]
local events_key = KEYS[11]
local snapshot_key = KEYS[12]
local health_key = KEYS[13]
local timers_key = KEYS[14]
local followups_key = KEYS[15]
local followup_jobs_key = KEYS[16]
local vanished_key = KEYS[17]

local digest = ARGV[4]
local snapshot_json = ARGV[5]
local changes_maxlen = ARGV[6]
local taken_over_ids = ARGV[7]
local now_ms = tonumber(ARGV[8])
local grace_ms = tonumber(ARGV[9])
local stable_ms = tonumber(ARGV[10])
local followup_due_ms = ARGV[11]
local max_removed_fraction = tonumber(ARGV[12])
local removal_confirmed = ARGV[13] == '1'
local worker_facts = ARGV[14]
local facts_version = ARGV[15]
local first_row_arg = 16  -- ARGV[16..]: the worker count, worker triples, instance count, quadruples

local p = first_row_arg
local n_workers = tonumber(ARGV[p]); p = p + 1
local present = {}
local workers = {}
for _ = 1, n_workers do
  present[ARGV[p]] = true
  workers[#workers + 1] = {ARGV[p], ARGV[p + 1], ARGV[p + 2]}
  p = p + 3
end
local n_instances = tonumber(ARGV[p]); p = p + 1

local stored_ids = redis.call('HKEYS', workers_key)
local removed = 0
for _, wid in ipairs(stored_ids) do
  if not present[wid] then removed = removed + 1 end
end
if not removal_confirmed and removed > max_removed_fraction * #stored_ids then
  return {'refused', removed, #stored_ids}
end

local exact = worker_facts ~= '' and (redis.call('GET', version_key) or '0') == facts_version
local version = redis.call('INCR', version_key)
local v = tostring(version)
redis.call('SET', snapshot_key, snapshot_json, 'NX')

local taken = {}
for _, rid in ipairs(decode_list(taken_over_ids)) do taken[rid] = true end

local kept, kept_keys, dropped, taken_over = {}, {}, {}, {}
local metas = redis.call('HGETALL', instance_meta_key)
for i = 1, #metas, 2 do
  local key, meta = metas[i], cjson.decode(metas[i + 1])
  if meta['src'] == 'gpusched' then
    local alive = true
    for _, w in ipairs(meta['w']) do
      if not present[tostring(w)] then alive = false end
    end
    if meta['rid'] ~= cjson.null and taken[meta['rid']] then
      taken_over[#taken_over + 1] = {key = key, meta = meta}
    elseif alive then
      kept[#kept + 1] = {key = key, v = meta['v'], i = meta['i']}
    else
      dropped[#dropped + 1] = {key = key, meta = meta, row = redis.call('HGET', instances_key, key),
        claims = redis.call('HGET', claims_key, key)}
    end
  end
end
table.sort(kept, function(a, b) return a.v < b.v or (a.v == b.v and a.i < b.i) end)
local keep = {}
for _, item in ipairs(kept) do
  keep[item.key] = true
  kept_keys[#kept_keys + 1] = item.key
end

for _, key in ipairs(redis.call('HKEYS', instances_key)) do
  if not keep[key] then
    redis.call('HDEL', instances_key, key)
    redis.call('HDEL', instance_meta_key, key)
    redis.call('HDEL', claims_key, key)
  end
end

local old_rows = {}
local stored = redis.call('HGETALL', workers_key)
for i = 1, #stored, 2 do old_rows[stored[i]] = stored[i + 1] end

local old_booked = {}
local booked_before = redis.call('HGETALL', booked_key)
for i = 1, #booked_before, 2 do old_booked[booked_before[i]] = tonumber(booked_before[i + 1]) end

redis.call('DEL', workers_key, worker_gpus_key, capacity_key, booked_key)
for _, w in ipairs(workers) do
  redis.call('HSET', workers_key, w[1], w[2])
  local gpu_keys = {}
  for _, pair in ipairs(decode_list(w[3])) do
    redis.call('HSET', capacity_key, pair[1], pair[2])
    gpu_keys[#gpu_keys + 1] = pair[1]
  end
  redis.call('HSET', worker_gpus_key, w[1], encode_list(gpu_keys))
end

for position = 0, n_instances - 1 do
  local key, row, meta_json, claims = ARGV[p], ARGV[p + 1], ARGV[p + 2], ARGV[p + 3]
  p = p + 4
  local meta = cjson.decode(meta_json)
  meta['v'] = version
  meta['i'] = position
  redis.call('HSET', instances_key, key, row)
  redis.call('HSET', instance_meta_key, key, cjson.encode(meta))
  redis.call('HSET', claims_key, key, claims)
end

for _, key in ipairs(redis.call('HKEYS', claims_key)) do
  for _, pair in ipairs(decode_list(redis.call('HGET', claims_key, key))) do
    if pair[2] ~= '0' then redis.call('HINCRBY', booked_key, pair[1], pair[2]) end
  end
end

local dropped_brief = {}  -- the event names them; the rows and claims stay in the follow-up job
for _, item in ipairs(dropped) do dropped_brief[#dropped_brief + 1] = {key = item.key, meta = item.meta} end
local data = cjson.encode({digest = digest, kept = kept_keys, dropped = dropped_brief,
  taken_over = taken_over, workers = n_workers, instances = n_instances})
redis.call('XADD', changes_key, 'MAXLEN', '~', changes_maxlen, '*',
  'version', v, 'type', 'sched.cluster.applied', 'data', data)
emit(events_key, 'sched.cluster.applied', '', v, data, 0)

local n = 0
local clocks = {health = health_key, timers = timers_key, events = events_key}
for _, w in ipairs(workers) do
  local gpu_keys = {}
  for _, pair in ipairs(decode_list(w[3])) do gpu_keys[#gpu_keys + 1] = pair[1] end
  local over = overbooked(booked_key, capacity_key, gpu_keys)
  if #over > 0 then
    n = n + 1
    emit(events_key, 'sched.ledger.overbooked', '', v,
      cjson.encode({worker_id = tonumber(w[1]), gpus = over}), n)
  end
  if track_health(clocks, w[1], worker_state(old_rows[w[1]]), worker_state(w[2]),
      now_ms, grace_ms, stable_ms, n + 1) then
    n = n + 1
  end
end
for wid, _ in pairs(old_rows) do
  if not present[wid] then
    redis.call('HDEL', health_key, wid)
    redis.call('ZREM', timers_key, 'grace:' .. wid, 'stable:' .. wid)
    redis.call('HSET', vanished_key, wid, now_ms)
  end
end
for _, w in ipairs(workers) do redis.call('HDEL', vanished_key, w[1]) end

-- the wake: the workers' facts, plus capacity freed on a GPU that is still there
local wake = {}
if exact then
  wake = cjson.decode(worker_facts)
  local freed, seen, gpus = {}, {}, {}
  for gk, before in pairs(old_booked) do
    local wid = gk:match('^(%d+):')
    local after = tonumber(redis.call('HGET', booked_key, gk) or '0')
    if wid and redis.call('HEXISTS', capacity_key, gk) == 1 and after < before then
      gpus[#gpus + 1] = gk
      if not seen[wid] then
        seen[wid] = true
        freed[#freed + 1] = tonumber(wid)
      end
    end
  end
  table.sort(freed)
  table.sort(gpus)
  -- gpus: the GPUs whose bookings shrank; only their room can place what waits
  if #freed > 0 then wake[#wake + 1] = {kind = 'capacity_freed', workers = freed, gpus = gpus} end
else
  wake = {{kind = 'snapshot', workers = {}}}
end
for _, fact in ipairs(wake) do fact['version'] = version end
if #wake > 0 then redis.call('INCR', epoch_key) end

local job = follow_up({due = followups_key, jobs = followup_jobs_key}, followup_due_ms,
  'worker_gone_in_snapshot', dropped, true, wake, {removal_confirmed = removal_confirmed})
return {'applied', v, cjson.encode(dropped), job}
