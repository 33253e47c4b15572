-- lib.lua — functions shared by the service's scripts.
--
-- Not a script of its own: tasks.state.scripts prepends this file to every
-- script it loads, so each script is one chunk and these are its local
-- functions. Nothing here reads KEYS. Every script that writes events
-- receives the event envelope first, ARGV[1..3] (event id, time, source);
-- it is bound here, once, for emit() and follow_up() (a script that writes
-- no event receives no envelope and never reads these three).

local event_id = ARGV[1]
local event_time = ARGV[2]
local event_source = ARGV[3]

-- Append one event to the audit stream (trimmed only behind a checkpoint). n > 0 suffixes the
-- event id (".1", ".2", ...) for the further events one script call writes.
local function emit(stream, etype, rid, version, data, n)
  local eid = event_id
  if n > 0 then eid = eid .. '.' .. n end
  return redis.call('XADD', stream, '*', 'schema_version', '1', 'type', etype,
    'event_id', eid, 'time', event_time, 'source', event_source, 'request_id', rid,
    'cluster_version', version, 'data', data)
end

-- A list written by tasks.state.ledger: a JSON array ("" or nil: empty). Claims
-- and capacities are [[gpu_key, "bytes"], ...], GPU keys and ids ["...", ...];
-- never a separator-joined string, so no value can spill into the next entry.
local function decode_list(text)
  if not text or text == '' then return {} end
  return cjson.decode(text)
end

-- A Lua array as a JSON array (cjson writes an empty table as "{}").
local function encode_list(items)
  if #items == 0 then return '[]' end
  return cjson.encode(items)
end

-- Release one instance: subtract its claims from the booked hash and forget
-- its row, meta and claims. Returns its meta (decoded), or nil if not held.
-- freed (optional, {gpus = {}, seen = {}}): the GPU keys it held claims on are
-- appended to freed.gpus, each once (the wake offers only their room).
local function release_instance(booked, instances, metas, claims, key, freed)
  local meta = redis.call('HGET', metas, key)
  if not meta then return nil end
  for _, pair in ipairs(decode_list(redis.call('HGET', claims, key))) do
    local gk, amount = pair[1], pair[2]
    if amount ~= '0' then
      if redis.call('HINCRBY', booked, gk, '-' .. amount) <= 0 then redis.call('HDEL', booked, gk) end
      if freed and not freed.seen[gk] then
        freed.seen[gk] = true
        freed.gpus[#freed.gpus + 1] = gk
      end
    end
  end
  redis.call('HDEL', instances, key)
  redis.call('HDEL', metas, key)
  redis.call('HDEL', claims, key)
  return cjson.decode(meta)
end

-- The GPUs of gpu_keys booked beyond their capacity (a GPU with no capacity
-- left in the ledger counts as overbooked), as the {gpu, booked, capacity}
-- rows of a sched.ledger.overbooked event; the one overbooked check of the
-- scripts (tasks.state.ledger.overbooked is the Python reader's).
local function overbooked(booked_key, capacity_key, gpu_keys)
  local over = {}
  for _, gk in ipairs(gpu_keys) do
    local booked = tonumber(redis.call('HGET', booked_key, gk) or '0')
    local cap = redis.call('HGET', capacity_key, gk)
    if not cap or booked > tonumber(cap) then
      over[#over + 1] = {gpu = gk, booked = booked, capacity = cap and tonumber(cap) or cjson.null}
    end
  end
  return over
end

-- The fields of a results-stream entry for request rid: a rescheduled request's
-- entries also carry reschedule_of, the request whose booking it replaces
-- (the record's "replaces").
local function result_fields(record, rid, result, status, terminal, seq)
  local fields = {'request_id', rid, 'result', result, 'status', status, 'terminal', terminal,
    'seq', seq}
  local replaces = redis.call('HGET', record, 'replaces')
  if replaces and replaces ~= '' then
    fields[#fields + 1] = 'reschedule_of'
    fields[#fields + 1] = replaces
  end
  return fields
end

-- The one way a request reaches state "done": append its terminal result to
-- the results stream, finish the record, drop its parked entry and its outbox
-- watchdog, and log sched.result.published (event id suffix n). k holds the
-- keys {record, results, events, parked, outbox}. A scheduled record lives as
-- long as its booking (the release path expires it); any other expires after
-- ttl seconds. Returns the results entry id.
local function finish(k, rid, status, result, digest, seq, attempt, maxlen, ttl, now, n)
  local id = redis.call('XADD', k.results, 'MAXLEN', '~', maxlen, '*',
    unpack(result_fields(k.record, rid, result, status, '1', seq)))
  redis.call('HSET', k.record, 'state', STATE.DONE, 'status', status, 'result', result,
    'result_id', id, 'result_digest', digest, 'seq', seq, 'updated_ms', now)
  if status ~= 'scheduled' then redis.call('EXPIRE', k.record, ttl) end
  redis.call('HDEL', k.parked, rid)
  redis.call('ZREM', k.outbox, rid .. '|' .. seq .. '|' .. attempt)
  emit(k.events, 'sched.result.published', rid, '', cjson.encode({status = status,
    terminal = true, results_id = id, result_digest = digest}), n)
  return id
end

-- The state of a stored worker row JSON (nil for "" = no row).
local function worker_state(row)
  if not row or row == '' then return nil end
  return cjson.decode(row)['state'] or 'not_ready'
end

-- Rescheduling hysteresis: a worker's readiness went from old_state (nil: the
-- worker is new) to new_state. Leaving "ready" (or arriving not ready) starts
-- its outage clock (down_since, kept if already running) and arms
-- grace:<id> at down_since + grace; becoming ready stamps up_since and, if
-- an outage clock runs, arms stable:<id> (which resets the clock only if the
-- worker is still ready then). Changes between two not-ready states, and a
-- new ready worker, change nothing. h = {health, timers, events}; the
-- sched.worker.health event gets id suffix n. Returns true if it wrote.
local function track_health(h, wid, old_state, new_state, now, grace_ms, stable_ms, n)
  if old_state == new_state or (old_state == nil and new_state == 'ready') then return false end
  if old_state ~= nil and old_state ~= 'ready' and new_state ~= 'ready' then return false end
  local raw = redis.call('HGET', h.health, wid)
  local clocks = raw and cjson.decode(raw) or {}
  local down, up = clocks['down_since_ms'], clocks['up_since_ms']
  if down == cjson.null then down = nil end
  if up == cjson.null then up = nil end
  if new_state ~= 'ready' then
    down = down or now
    up = nil
    redis.call('ZADD', h.timers, math.max(now, down + grace_ms), 'grace:' .. wid)
    redis.call('ZREM', h.timers, 'stable:' .. wid)
  else
    up = now
    if down then redis.call('ZADD', h.timers, now + stable_ms, 'stable:' .. wid) end
  end
  local record = {down_since_ms = down or cjson.null, up_since_ms = up or cjson.null}
  redis.call('HSET', h.health, wid, cjson.encode(record))
  emit(h.events, 'sched.worker.health', '', '', cjson.encode({worker_id = tonumber(wid),
    state = new_state, down_since_ms = record.down_since_ms, up_since_ms = record.up_since_ms}), n)
  return true
end

-- Record the follow-up work of a cluster change (reschedule released
-- bookings, expire their records, wake parked requests) under the event id
-- (ARGV[1]): the job JSON in the jobs hash, the id in the follow-ups sorted set
-- due at `due`, in case the caller dies before doing it. The caller chose the
-- event id, so it runs the job at once (also when this script's reply was
-- lost and a retry found nothing left to change) and then deletes it. extra
-- (optional) adds fields to the job.
local function follow_up(f, due, reason, released, reschedule, wake, extra)
  local job = {reason = reason, released = released, reschedule = reschedule, wake = wake}
  for name, value in pairs(extra or {}) do job[name] = value end
  redis.call('HSET', f.jobs, event_id, cjson.encode(job))
  redis.call('ZADD', f.due, due, event_id)
  return event_id
end
