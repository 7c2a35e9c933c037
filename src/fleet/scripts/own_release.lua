-- Hands a pacing key over (a graceful leave, an idle origin forgotten, or an origin
-- whose traffic comes from another member): what the next owner must start from stays,
-- when it was released and per robots.txt group "last_end|paused_until|backoff" (Redis
-- ms). Without an heir the claim goes, and the first member to meet the key takes it;
-- with one, the claim names the heir (marked released): every member routes to it, and
-- it takes the key, and the facts, with the next request it routes. Only the holder
-- releases.
-- KEYS: the claim hash. ARGV: member id, epoch, keep ms, heir member id ('' none), heir
-- epoch, then group, state pairs.
local m = redis.call('HGET', KEYS[1], 'm')
local e = redis.call('HGET', KEYS[1], 'e')
if m ~= ARGV[1] or e ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'm', 'e')
else
  redis.call('HSET', KEYS[1], 'm', ARGV[4], 'e', ARGV[5])
end
redis.call('HSET', KEYS[1], 'released', tostring(now))
for i = 6, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'g:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
