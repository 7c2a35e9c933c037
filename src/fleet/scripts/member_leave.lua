-- MEMBER_LEAVE: a member leaves gracefully, once it has handed over every origin it
-- owned: its record goes, if it is still this incarnation's (epoch).
-- KEYS: 1 members. ARGV: 1 member id, 2 epoch.
local m = member(KEYS[1], ARGV[1])
if m and m.epoch == tonumber(ARGV[2]) then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
