-- group_read.lua — a consumer group's next entries, only up to the acknowledged position.
--
-- XREADGROUP ... > hands out whatever follows the group's last delivered id.
-- Through Sentinel an entry is not acknowledged until a replica has it
-- (tasks.state.replication), so this hands out only the entries up to the
-- stored position: it counts them first (XRANGE after the group's last
-- delivered id, up to the position), then reads exactly that many — in one
-- atomic step, so no consumer of the group is ever handed an entry past it.
--
-- KEYS[1]  the stream                       gpusched:results
-- KEYS[2]  acknowledged position (JSON)     gpusched:acked
--
-- ARGV[1]  group
-- ARGV[2]  consumer
-- ARGV[3]  count (at most)
--
-- Returns the entries handed out ({{id, {field, value, ...}}, ...}, as XRANGE replies), {}
-- when nothing acknowledged is new; an error when the stream or the group is missing.

local stream_key = KEYS[1]
local acked_key = KEYS[2]

local group = ARGV[1]
local consumer = ARGV[2]
local count = tonumber(ARGV[3])

local raw = redis.call('GET', acked_key)
if not raw then return {} end
local bound = (cjson.decode(raw)['streams'] or {})[stream_key]
if not bound then return {} end

local last = nil
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream_key)) do
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if fields['name'] == group then last = fields['last-delivered-id'] end
end
if not last then return redis.error_reply('NOGROUP no such consumer group ' .. group) end

local span = redis.call('XRANGE', stream_key, '(' .. last, bound, 'COUNT', count)
if #span == 0 then return {} end
-- delivers exactly the entries of span: the next #span after the last delivered id
redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', #span, 'STREAMS', stream_key, '>')
return span
