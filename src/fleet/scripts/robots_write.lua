-- ROBOTS_WRITE: stores a fetch's result under the fleet-wide fetch lock, publishes
-- the new version, releases the lock. The fetch's end counts as the origin's last
-- request on every schedule (`end`).
-- KEYS: 1 robots record, 2 lock
-- ARGV: 1 lock token, 2 kind, 3 body, 4 why, 5 fresh ms, 6 fetched ms, 7 since ms,
--       8 retry ms (relative to now; '' for none), 9 failures, 10 outcome, 11 cause,
--       12 keep ms, 13 channel, 14 origin
-- Returns the new version.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function at(rel)
  if rel == '' then return '' end
  return now + tonumber(rel)
end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'kind', ARGV[2], 'body', ARGV[3], 'why', ARGV[4], 'fresh', at(ARGV[5]), 'fetched', at(ARGV[6]), 'since', at(ARGV[7]), 'retry', at(ARGV[8]), 'failures', ARGV[9], 'outcome', ARGV[10], 'cause', ARGV[11], 'end', now)
redis.call('PEXPIRE', KEYS[1], ARGV[12])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('PUBLISH', ARGV[13], 'r\n' .. v .. '\n' .. ARGV[14])
return v
