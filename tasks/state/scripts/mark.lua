-- mark.lua — one write marking how far the streams and the cluster got, for WAIT to cover.
--
-- The caller sends it after the writes it wants acknowledged, with WAIT right
-- behind it on the same connection: WAIT covers this connection's last write,
-- and every entry, version and generation read here was written before this
-- mark, so a replica that acknowledges the mark holds them all. The caller then
-- stores the position with advance.lua (tasks.state.replication).
--
-- KEYS[1]  acknowledged position (JSON)     gpusched:acked
-- KEYS[2]  mark counter                     gpusched:acked:marks
-- KEYS[3]  cluster version                  gpusched:cluster:version
-- KEYS[4]  data generation                  gpusched:generation
-- KEYS[5..] the streams whose last entry the position records (results, events, deadletter)
--
-- ARGV[1]  "1": mark only if something changed since the acknowledged position; "0": always
--
-- Returns {"marked", seq, position JSON}, or {"current"} when nothing changed and ARGV[1]
-- is "1" (nothing is written then).

local acked_key = KEYS[1]
local marks_key = KEYS[2]
local version_key = KEYS[3]
local generation_key = KEYS[4]
local streams_from = 5  -- KEYS[5..] the streams

local only_if_new = ARGV[1] == '1'

local generation = ''
local raw_generation = redis.call('GET', generation_key)
if raw_generation then
  local ok, record = pcall(cjson.decode, raw_generation)
  if ok and type(record) == 'table' and record['id'] then
    generation = tostring(record['id'])
  else
    generation = raw_generation
  end
end

local streams = {}
for i = streams_from, #KEYS do
  local last = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
  streams[KEYS[i]] = last[1] and last[1][1] or '0-0'
end
local version = tonumber(redis.call('GET', version_key) or '0')

if only_if_new then
  local raw = redis.call('GET', acked_key)
  if raw then
    local known = cjson.decode(raw)
    local same = known['version'] == version and known['generation'] == generation
    local known_streams = known['streams'] or {}
    for name, id in pairs(streams) do
      if known_streams[name] ~= id then same = false end
    end
    if same then return {'current'} end
  end
end

local seq = redis.call('INCR', marks_key)
local position = cjson.encode({seq = seq, version = version, generation = generation, streams = streams})
return {'marked', seq, position}
