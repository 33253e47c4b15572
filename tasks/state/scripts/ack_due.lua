-- ack_due.lua — remove a fired timer only if it still has the score the
-- caller saw (a timer re-armed meanwhile, e.g. a newer retry, survives).
--
-- KEYS[1]  delay sorted set         gpusched:timers (the drainer acks fired timers with it)
--
-- ARGV[1]  member
-- ARGV[2]  expected score (ms)
--
-- Returns 1 if removed, 0 otherwise.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
