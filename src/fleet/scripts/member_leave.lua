-- MEMBER_LEAVE: a member leaves gracefully, once it has handed over every origin it
-- could: its record stays, marked left, until its lease ends, if it is still this
-- incarnation's (epoch). A claim it could not release (a call that failed, a key it
-- held in no state to release) is then taken over as a vanished member's: not before
-- its lease end plus its `after` (own_claim.lua). Deleting the record instead would
-- let the next owner start at once, without the facts (the last exchange's end, the
-- Crawl-delay in force) it never handed over.
-- KEYS: 1 members. ARGV: 1 member id, 2 epoch.
local m = member(KEYS[1], ARGV[1])
if m and m.epoch == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], table.concat(
    {m.epoch, m.expires, 'left', m.peer, m.lease, m.after}, '|'))
  return 1
end
return 0
