-- release_lease.lua — release the decide lease if this holder still has it, and wake a waiter.
--
-- The lease is a plain SET NX PX of a random token (tasks.lease); a decider
-- waiting for it blocks on the wake list (BLPOP) instead of polling, so the
-- lease passes to the next decider one round trip after it is released. The
-- wake list holds at most one token and expires on its own.
--
-- KEYS[1]  decide lease             gpusched:lock:decide
-- KEYS[2]  wake list                gpusched:lock:decide:wake
--
-- ARGV[1]  the holder's token
-- ARGV[2]  wake list expiry (ms)
--
-- Returns 1 when released; 0 when the lease expired or belongs to another
-- holder (nothing changes then: releasing is idempotent).

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('RPUSH', KEYS[2], '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
