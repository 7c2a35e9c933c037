-- Claims a pacing key's ownership: taken when nobody holds it, when it still names the
-- owner the caller found gone (member and epoch), or when it names the caller itself
-- (an earlier incarnation of this process, whose turns it still knows). Otherwise the
-- holder is returned, for the caller to route to (or to find gone, and claim again).
-- On taking it, the durable facts another owner left are returned: when it released
-- the key (a graceful hand-over), and per robots.txt group "last_end|paused_until|backoff"
-- (Redis ms; last_end and paused_until 0 when none).
-- A claim nobody holds is taken only while the data set's boot id is the caller's
-- (when it gives one: outside a Cluster, where the boot id shares the server); else
-- 'lost': Redis restarted empty, and the owners have not written their claims again.
-- KEYS: the claim hash (rg:{<key>}:own), and with an expected boot id the boot id key.
-- ARGV: member id, epoch, expected member ('' none), expected epoch, keep ms, take (1:
-- take it when it may be taken; 0: only say who holds it), expected boot id ('' none).
local m = redis.call('HGET', KEYS[1], 'm')
local e = redis.call('HGET', KEYS[1], 'e')
local take = (not m) or (m == ARGV[1]) or (m == ARGV[3] and e == ARGV[4])
if ARGV[6] ~= '1' then
  if m then return {'held', m, e or '0'} end
  return {'free'}
end
if not take then
  return {'held', m, e or '0'}
end
if (not m) and ARGV[7] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[7] then
  return {'lost'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local facts = redis.call('HGETALL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'e', ARGV[2])
redis.call('HDEL', KEYS[1], 'released')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
local out = {'taken', tostring(now)}
for i = 1, #facts, 2 do
  local k = facts[i]
  if k == 'released' or string.sub(k, 1, 2) == 'g:' then
    out[#out + 1] = k
    out[#out + 1] = facts[i + 1]
  end
end
return out
