-- Writes an owned key's claim again after Redis may have lost it (restarted empty, a
-- replica promoted without it) or after this instance re-registered with a new epoch:
-- kept when the claim is missing or still this member's; lost (0) when another member
-- holds it now.
-- KEYS: the claim hash. ARGV: member id, epoch, keep ms.
local m = redis.call('HGET', KEYS[1], 'm')
if m and m ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'e', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
