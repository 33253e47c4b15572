-- reschedule_notice.lua — announce, once per transition, that rescheduling off
-- lost workers was suspended (more than max_unreachable_fraction of the
-- workers are down) or resumed.
--
-- The suspension flag holds the notice that suspended it; "suspend" sets it
-- only if unset, "resume" deletes it only if set, and each transition adds one
-- entry (request_id "", terminal 0) to the results stream (a resume also logs
-- sched.reschedule.resumed), so a control plane reading only the results
-- stream learns why lost placements are not moving.
--
-- KEYS[1]  suspension flag          gpusched:reschedule:suspended
-- KEYS[2]  results stream           gpusched:results
-- KEYS[3]  audit stream             gpusched:events
--
-- ARGV[1]  event id                 ARGV[2] event time (ISO)    ARGV[3] event source
-- ARGV[4]  "suspend" or "resume"
-- ARGV[5]  notice JSON (status, down, workers, max_unreachable_fraction)
-- ARGV[6]  results stream MAXLEN (approximate)
--
-- Returns the results entry id, or "" when the state did not change.

local flag_key = KEYS[1]
local results_key = KEYS[2]
local events_key = KEYS[3]

local mode = ARGV[4]
local notice = ARGV[5]
local results_maxlen = ARGV[6]

local status = 'reschedule_suspended'
if mode == 'suspend' then
  if not redis.call('SET', flag_key, notice, 'NX') then return '' end
else
  if redis.call('DEL', flag_key) == 0 then return '' end
  status = 'reschedule_resumed'
end
local id = redis.call('XADD', results_key, 'MAXLEN', '~', results_maxlen, '*',
  'request_id', '', 'result', notice, 'status', status, 'terminal', '0', 'seq', '0')
-- each postponement is already logged as sched.reschedule.suspended by its caller
if mode ~= 'suspend' then emit(events_key, 'sched.reschedule.resumed', '', '', notice, 0) end
return id
