-- OWN_LOOK: who owns a pacing key, without claiming it: its holder while that is a
-- live member, else 'free' (a claim would take it).
-- KEYS: 1 the claim, 2 members. Returns {'held', member, epoch, peer, state} or {'free'}.
local now = now_ms()
local m = redis.call('HGET', KEYS[1], 'm')
if m then
  local h = member(KEYS[2], m)
  if live(h, now) then return {'held', m, h.epoch, h.peer, h.state} end
end
return {'free'}
