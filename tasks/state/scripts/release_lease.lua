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

local lease_key = KEYS[1]
local wake_list_key = KEYS[2]

local token = ARGV[1]
local wake_expiry_ms = ARGV[2]

if redis.call('GET', lease_key) ~= token then return 0 end
redis.call('DEL', lease_key, wake_list_key)
redis.call('RPUSH', wake_list_key, '1')
redis.call('PEXPIRE', wake_list_key, wake_expiry_ms)
return 1
