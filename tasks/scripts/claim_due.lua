-- claim_due.lua — lease the due members of a delay set (outbox or timers).
--
-- At-least-once hand-off: a due member is not removed but pushed to the lease
-- deadline; the caller acts on it and then removes it with ack_due.lua. If
-- the caller dies, the member becomes due again when the lease expires.
--
-- KEYS[1]  sorted set               gpusched:outbox | gpusched:timers
--
-- ARGV[1]  now (ms)
-- ARGV[2]  lease deadline (ms)
-- ARGV[3]  maximum members to claim
--
-- Returns the claimed members (each now scored ARGV[2]).

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
