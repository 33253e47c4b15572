-- claim_due.lua — lease the due members of a delay set (outbox, timers, follow-ups).
--
-- At-least-once hand-off: a due member is not removed but pushed to the lease
-- deadline; the caller acts on it and then removes or re-arms it (a timer with
-- ack_due.lua, an outbox entry with redrive.lua, a follow-up once done). If
-- the caller dies, the member becomes due again when the lease expires.
--
-- KEYS[1]  sorted set               gpusched:outbox | gpusched:timers | gpusched:followups
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
