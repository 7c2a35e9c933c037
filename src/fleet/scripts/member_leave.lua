-- A member leaves gracefully, once it has handed over every origin it owned: its record
-- goes, if it is still this incarnation's (epoch).
-- KEYS: members hash. ARGV: member id, epoch.
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and string.match(held, '^(%d+)|') == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
