-- advance.lua — store an acknowledged position, unless a later mark's position is stored already.
--
-- Positions are stored only after WAIT confirmed their mark (mark.lua), so
-- everything up to the stored position is on a replica (or, with replicas 0,
-- on a master that had none attached: tasks.state.replication). Calls can
-- arrive out of order; the mark's seq keeps the latest.
--
-- KEYS[1]  acknowledged position (JSON)     gpusched:acked
--
-- ARGV[1]  the mark's seq
-- ARGV[2]  its position JSON (as mark.lua returned it)
-- ARGV[3]  replicas that acknowledged it (WAIT's reply; 0: the master alone)
--
-- Returns 1 when stored; 0 when a later mark's position is there.

local acked_key = KEYS[1]

local seq = tonumber(ARGV[1])
local position_json = ARGV[2]
local replicas = tonumber(ARGV[3])

local raw = redis.call('GET', acked_key)
if raw and tonumber(cjson.decode(raw)['seq']) >= seq then return 0 end
local position = cjson.decode(position_json)
position['replicas'] = replicas
redis.call('SET', acked_key, cjson.encode(position))
return 1
