-- announce_released.lua — tell the results stream that a published placement's
-- booking was released (instance deleted, worker lost or removed, snapshot,
-- cancel), once per booking.
--
-- Written by the release's follow-up (tasks.flows.followups), before any
-- rescheduling it does, so a control plane reading only the results stream
-- sees the old placement's "released" before its replacement's result (which
-- carries reschedule_of). Only a placement whose "scheduled" result was
-- published is announced: a booking released before its publish (a cancel
-- racing it) was never shown to anyone.
--
-- KEYS[1]  request record hash      gpusched:req:<request_id> (the booking's request)
-- KEYS[2]  results stream           gpusched:results
--
-- ARGV[1]  request id
-- ARGV[2]  instance key             ARGV[3] the booking's marker "<instance key>@<booked version>"
-- ARGV[4]  release reason (instance_deleted | worker_lost | worker_removed | worker_gone_in_snapshot | client | ...)
-- ARGV[5]  "1" when the booking is rescheduled as a new request, else "0"
-- ARGV[6]  results stream MAXLEN (approximate)
--
-- Returns the results entry id, or "" when there is nothing to announce
-- (announced already, never published, or the record is gone).

local record_key = KEYS[1]
local results_key = KEYS[2]

local rid = ARGV[1]
local instance_key = ARGV[2]
local marker = ARGV[3]
local reason = ARGV[4]
local rescheduling = ARGV[5] == '1'
local results_maxlen = ARGV[6]

local r = redis.call('HMGET', record_key, 'state', 'status', 'released', 'seq')
if r[1] ~= STATE.DONE or r[2] ~= 'scheduled' or r[3] == marker then return '' end
redis.call('HSET', record_key, 'released', marker)
local notice = cjson.encode({request_id = rid, status = 'released', instance_key = instance_key,
  reason = reason, rescheduling = rescheduling})
local fields = result_fields(record_key, rid, notice, 'released', '0', r[4] or '0')
fields[#fields + 1] = 'reason'
fields[#fields + 1] = reason
return redis.call('XADD', results_key, 'MAXLEN', '~', results_maxlen, '*', unpack(fields))
