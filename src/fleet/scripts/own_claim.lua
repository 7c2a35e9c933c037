-- OWN_CLAIM: who owns a pacing key, decided here from the members' records and Redis'
-- clock, never from a member's view of them. The caller must be a live, registered
-- member of the current generation.
--
-- mode claim: the key is taken when nobody holds it, when it names the caller (an
--   earlier epoch of it, or the heir it was handed to), or when its holder is no live
--   member: then not before the holder's lease end plus its `after` (its exchanges may
--   run until then). A live holder is returned instead, for the caller to hand to.
-- mode reassert: the caller holds the key in an earlier epoch or generation and writes
--   it again; 'lost' when another member holds it, or it was let go (even to the
--   caller: a hand-over is taken by a claim, which carries its facts).
-- mode vouch: a reassert by an owner that acted for the key without a break up to the
--   generation's change: it alone can have been acting, so the fence does not apply.
-- A claim written before the current generation (or none at all) is not acted on
-- before the fence (member_renew.lua), but by a vouching owner: lost writes may hide
-- another owner. One taken while the fence holds is provisional: its holder confirms
-- it again once its wait is over (a fence extended meanwhile applies to it).
--
-- A takeover is always provisional, and waits at least the confirmation window (ARGV
-- 6): a forward step of Redis' clock makes a live owner look lapsed, and the window
-- lets a renewal see the step and extend the fence (member_renew.lua), which the
-- confirmation then waits for. A takeover waits for the fence too.
-- KEYS: 1 the claim, 2 members, 3 generation, 4 fence, 5 the generation's server.
-- ARGV: 1 member id, 2 epoch, 3 generation, 4 keep ms, 5 mode (claim | reassert | vouch),
-- 6 the confirmation window ms (absent from older members: 0).
-- Returns {'taken', how, bound ms, n, provisional (1 | 0), facts...} (how: claimed,
-- handed, reclaimed, taken_over; bound: the not-before from now, negative when past,
-- 0 when none; n the taking's number), {'held', member, epoch, peer, state}, {'lost'}, {'stale'} (another
-- generation, or another server than the generation's: renew first) or
-- {'unregistered'} (not a live member in that epoch).
local now = now_ms()
if redis.call('GET', KEYS[3]) ~= ARGV[3] or not same_server(KEYS[5]) then
  return {'stale'}
end
local me = member(KEYS[2], ARGV[1])
if not (live(me, now) and me.epoch == tonumber(ARGV[2]) and me.state == 'up') then
  return {'unregistered'}
end
local mode = ARGV[5]
local c = read_claim(KEYS[1])
local nb, how, retaken = c.nb, 'claimed', false
-- A claim let go since (released, or handed to this very member) is not written
-- again but lost: its heir takes it with a claim, and the facts handed over with it.
if mode ~= 'claim' and (c.m ~= ARGV[1] or c.released) then
  if c.m ~= nil or c.released then return {'lost'} end
  how = 'reclaimed'  -- lost with the data set
elseif c.m == ARGV[1] then
  how = c.released and 'handed' or 'reclaimed'
  if how == 'reclaimed' and c.pv and mode == 'claim' then
    -- A takeover (or a claim made inside a fence) this member never confirmed, its
    -- answer lost or the call run late: claimed again, it is provisional again and its
    -- window counts from now, as Redis' clock may have stepped since.
    nb = math.max(nb, now + tonumber(ARGV[6] or '0'))
    retaken = true
  end
elseif c.m ~= nil then
  local h = member(KEYS[2], c.m)
  if live(h, now) then return {'held', c.m, h.epoch, h.peer, h.state} end
  -- Not before its exchanges must be over, nor before the confirmation window; and
  -- confirmed again as a provisional claim is (the fence applies).
  nb = math.max(nb, h and (h.expires + h.after) or now, now + tonumber(ARGV[6] or '0'))
  how = 'taken_over'
  c.pv = true
elseif c.released then
  how = 'handed'
end
local fence = tonumber(redis.call('GET', KEYS[4]) or '0')
if (c.gen ~= ARGV[3] or c.pv) and mode ~= 'vouch' then
  nb = math.max(nb, fence)
end
local provisional = (fence > now and nb > now) or how == 'taken_over' or retaken
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'e', ARGV[2], 'gen', ARGV[3], 'nb', nb)
if provisional then
  redis.call('HSET', KEYS[1], 'pv', 1)
else
  redis.call('HDEL', KEYS[1], 'pv')
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HDEL', KEYS[1], 'released')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
-- The bound from now (ms): positive, how long the caller waits; negative, how long ago
-- a previous owner's last exchange must have ended (its Crawl-delay counts from then);
-- 0 only when there is none (a key nobody held).
local bound = 0
if nb > 0 then
  bound = nb - now
  if bound == 0 then bound = 1 end
end
local out = {'taken', how, bound, n, provisional and 1 or 0}
for i = 1, #c.facts do out[#out + 1] = c.facts[i] end
return out
