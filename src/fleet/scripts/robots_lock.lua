-- ROBOTS_LOCK: the fleet-wide fetch lock of an origin's robots.txt, unless a copy
-- newer than the caller's has been written meanwhile (then it has nothing to fetch).
-- KEYS: 1 lock, 2 robots record. ARGV: 1 token, 2 ttl ms, 3 the version the caller
-- read (-1: fetch whatever is stored, a forced refresh).
-- Returns 1 when taken, 0 when another instance holds it, -1 when a newer copy exists.
local seen = tonumber(ARGV[3])
if seen >= 0 and (tonumber(redis.call('HGET', KEYS[2], 'v')) or 0) > seen then return -1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
