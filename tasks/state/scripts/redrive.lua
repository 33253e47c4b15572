-- redrive.lua — the outbox watchdog's step for one due entry
-- "<request_id>|<seq>|<attempt>": decide whether the request must be driven
-- again, and push the entry's next deadline out exponentially so that a
-- request merely waiting in a long queue backlog gets a bounded number of
-- extra messages (each harmless: one decision per attempt is recorded).
--
-- KEYS[1]  request record hash      gpusched:req:<request_id>
-- KEYS[2]  outbox sorted set        gpusched:outbox
-- KEYS[3]  audit stream             gpusched:events
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  request id
-- ARGV[5]  decision seq             ARGV[6] attempt
-- ARGV[7]  score the drainer leased the entry at (ms)
-- ARGV[8]  now (ms)
-- ARGV[9]  watchdog period (ms, stuck_after_s)
-- ARGV[10] most doublings of the period between two re-drives
--
-- Returns {"gone", state} when the entry is obsolete (request unknown, at
-- another attempt, parked or done; the entry is removed if still leased);
-- otherwise re-arms the entry at now + period * 2^min(n, ARGV[10]) for the
-- n-th re-drive of this attempt, logs sched.request.redriven and returns
-- {"publish", step_json} for a booked request (its publish step was lost) or
-- {"decide", state}.

local record_key = KEYS[1]
local outbox_key = KEYS[2]
local events_key = KEYS[3]

local rid = ARGV[4]
local seq = ARGV[5]
local attempt = ARGV[6]
local leased_score = ARGV[7]
local now_ms = ARGV[8]
local period_ms = ARGV[9]
local max_doublings = ARGV[10]

local member = rid .. '|' .. seq .. '|' .. attempt
local r = redis.call('HMGET', record_key, 'state', 'seq', 'attempt', 'redriven', 'step')
local state = r[1]
if not state or r[2] ~= seq or r[3] ~= attempt or state == STATE.DONE or state == STATE.PARKED then
  local score = redis.call('ZSCORE', outbox_key, member)
  if score and tonumber(score) == tonumber(leased_score) then redis.call('ZREM', outbox_key, member) end
  return {'gone', state or ''}
end

local n = 1
local prefix, count = string.match(r[4] or '', '^(.*)#(%d+)$')
if prefix == member then n = tonumber(count) + 1 end
local due = tonumber(now_ms) + tonumber(period_ms) * 2 ^ math.min(n, tonumber(max_doublings))
redis.call('ZADD', outbox_key, 'XX', due, member)
redis.call('HSET', record_key, 'redriven', member .. '#' .. n)
emit(events_key, 'sched.request.redriven', rid, '', cjson.encode({seq = tonumber(seq),
  attempt = tonumber(attempt), state = state, redrives = n, next_due_ms = due}), 0)
if state == STATE.BOOKED and r[5] and r[5] ~= '' then return {'publish', r[5]} end
return {'decide', state}
