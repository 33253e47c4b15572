-- checkpoint.lua — read the cluster at its current version for an audit
-- checkpoint, and close the log behind it, in one atomic step.
--
-- Returns the cluster rows at the current version, the requests not finished
-- yet (the outbox's and the parked ones: the only requests that can still be
-- decided), and the id of the sched.audit.checkpointed event it appends: every
-- change after that id has a higher version. It raises the decision floor to
-- the version, so no decision read on an older version is recorded after that
-- event (record_decision.lua refuses it as outdated and it is decided again):
-- every decision logged after the checkpoint replays from it.
--
-- KEYS[1]  cluster version counter  gpusched:cluster:version
-- KEYS[2]  workers hash             gpusched:cluster:workers
-- KEYS[3]  instances hash           gpusched:cluster:instances
-- KEYS[4]  instance meta hash       gpusched:cluster:instance_meta
-- KEYS[5]  audit stream             gpusched:events
-- KEYS[6]  outbox sorted set        gpusched:outbox
-- KEYS[7]  parked hash              gpusched:parked
-- KEYS[8]  decision floor           gpusched:audit:floor
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
--
-- Returns {version, event_id, workers (flat id, row, ...), instances (flat key,
-- row, ...), metas (flat key, meta, ...), outbox members, parked request ids}.

local version_key = KEYS[1]
local workers_key = KEYS[2]
local instances_key = KEYS[3]
local instance_meta_key = KEYS[4]
local events_key = KEYS[5]
local outbox_key = KEYS[6]
local parked_key = KEYS[7]
local floor_key = KEYS[8]

local version = redis.call('GET', version_key) or '0'
if tonumber(version) > tonumber(redis.call('GET', floor_key) or '0') then
  redis.call('SET', floor_key, version)
end
local id = emit(events_key, 'sched.audit.checkpointed', '', version,
  cjson.encode({version = tonumber(version)}), 0)
return {version, id, redis.call('HGETALL', workers_key), redis.call('HGETALL', instances_key),
  redis.call('HGETALL', instance_meta_key), redis.call('ZRANGE', outbox_key, 0, -1),
  redis.call('HKEYS', parked_key)}
