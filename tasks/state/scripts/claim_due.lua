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

local delay_set = KEYS[1]

local now_ms = ARGV[1]
local lease_until_ms = ARGV[2]
local limit = tonumber(ARGV[3])

local due = redis.call('ZRANGEBYSCORE', delay_set, '-inf', now_ms, 'LIMIT', 0, limit)
for _, member in ipairs(due) do
  redis.call('ZADD', delay_set, lease_until_ms, member)
end
return due
