-- ack_due.lua — remove a fired timer only if it still has the score the
-- caller saw (a timer re-armed meanwhile, e.g. a newer retry, survives).
--
-- KEYS[1]  delay sorted set         gpusched:timers (the drainer acks fired timers with it)
--
-- ARGV[1]  member
-- ARGV[2]  expected score (ms)
--
-- Returns 1 if removed, 0 otherwise.

local delay_set = KEYS[1]

local member = ARGV[1]
local expected_score = ARGV[2]

local score = redis.call('ZSCORE', delay_set, member)
if score and tonumber(score) == tonumber(expected_score) then
  return redis.call('ZREM', delay_set, member)
end
return 0
